"""The rules of PROTOCOL.md ("Time and freshness", "Transitions and verdicts"): the rule table.

    fresh / unknown / stale             state.freshness (stale_from is its inverse)
    rule 0  record does not decode      WorldState._slow (world.py; codec.decode_fields)
    rule 1  sender fenced               fenced
    rule 2  ReleaseGroup                release_group
    rule 3  group paused                paused
    rule 4  ClaimingPartition           claim
    rule 5  Heartbeat                   heartbeat (renewal and restart takeover)
            HeartbeatingTask            heartbeat (version 3 tasks: with a position vector)
            MemberHeartbeat entry       member_beat (version 7: property h, then heartbeat)
            HeartbeatingTask (v8)       task_beat (version 8: property i, then heartbeat)
            NamingTenure (v9)           name (version 9: property j)
    rule 6  ReleasingPartition          release
            ReleasingTask               release (version 3 tasks: with a position vector)
    rule 7  ClaimingMessages            claim_messages
    rule 8  AnnouncingMember            membership.announce (version 2 membership)
    rule 9  LeavingGroup                membership.leave

Rules 1 to 7 are the methods of the same names of :class:`Rules`, which also holds the
properties later versions added to them (a, b, c, e, f, g, h, i, j: a method each) and the table
that sends each record type to its rule (:meth:`Rules.transitions`): everything that
decides a verdict is in this module. A rule judges one record that reached it (no earlier
rule fired), changes the state it concerns when the record is accepted (a
``state.PartitionEntry``, the fenced instances, the pause windows) and returns the verdict;
a rejected record changes nothing. Rules neither decode, look anything up nor count
rejections: ``WorldState.apply_many`` does that (with its identity caches and its lanes) and
dispatches here in the rules' order.
The queries (``WorldState.freshness``, ``claimable``, ``logmarshal.core.claims.stale_at``)
classify with the same :func:`freshness`.

Verdicts are the shared instances of ``verdict.ACCEPTED`` / ``REJECTED`` wherever possible:
replay allocates none for a heartbeat or a rejection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ._codec import (
    T_CLAIMING_MESSAGES,
    T_CLAIMING_PARTITION,
    T_HEARTBEAT,
    T_HEARTBEATING_TASK,
    T_NAMING_TENURE,
    T_RELEASING_PARTITION,
    T_RELEASING_TASK,
)
from ._messages import Positions

# The time vocabulary lives with the state it judges; the rules use it and pass it on (the
# consumer core and the audit import it from here).
from ._state import (
    FRESH,
    NO_POSITION,
    STALE,
    UNKNOWN,
    PartitionEntry,
    Sender,
    fence_key,
    freshness,
    stale_from,
)
from ._verdict import ACCEPTED, REJECTED, Effect, Reason, Verdict

__all__ = [
    "FRESH",
    "HOLDER_MOVES",
    "RENEWED_KEPT",
    "RENEWED_LATE_KEPT",
    "RULES",
    "STALE",
    "T_CLAIM_V5",
    "T_CLAIM_V6",
    "T_MEMBER_BEAT",
    "T_NAME_V9",
    "T_RELEASE_TASK_V6",
    "T_RELEASE_V6",
    "T_TASK_BEAT_V8",
    "UNKNOWN",
    "Rules",
    "Transition",
    "fence_key",
    "freshness",
    "stale_from",
    "tenure_floor",
]

#: ``apply_many``'s own codes for the versioned records judged differently from their
#: version 1 type (a type byte is below 256): a version 5 ClaimingPartition (it waits out a
#: lease the log took away early), the version 6 ClaimingPartition (its offset names the
#: tenure it begins), ReleasingPartition and ReleasingTask (they name the tenure they end)
T_CLAIM_V5 = 0x100 | T_CLAIMING_PARTITION
T_CLAIM_V6 = 0x600 | T_CLAIMING_PARTITION
T_RELEASE_V6 = 0x600 | T_RELEASING_PARTITION
T_RELEASE_TASK_V6 = 0x600 | T_RELEASING_TASK
#: ... and one entry of a version 7 MemberHeartbeat (a heartbeat that names its tenure)
T_MEMBER_BEAT = 0x700 | T_HEARTBEAT
#: ... and a version 8 HeartbeatingTask (a task's heartbeat that names its tenure)
T_TASK_BEAT_V8 = 0x800 | T_HEARTBEATING_TASK
#: ... and a version 9 NamingTenure (the holder names its tenure)
T_NAME_V9 = 0x900 | T_NAMING_TENURE

_CLAIMED = ACCEPTED[Effect.CLAIMED]
_RENEWED = ACCEPTED[Effect.RENEWED]
_RENEWED_LATE = ACCEPTED[Effect.RENEWED_LATE]
_RELEASED = ACCEPTED[Effect.RELEASED]
_NAMED = ACCEPTED[Effect.NAMED]
#: property g's renewals (a holder's late heartbeat: renewed, its position not set): equal to
#: RENEWED and RENEWED_LATE, the same verdict to every reader, in every window and snapshot,
#: but other objects, so that a fold that follows positions without the world's state (the
#: audit) can tell that this heartbeat set none
RENEWED_KEPT = Verdict(True, effect=Effect.RENEWED)
RENEWED_LATE_KEPT = Verdict(True, effect=Effect.RENEWED_LATE)
_MESSAGES_CLAIMED = ACCEPTED[Effect.MESSAGES_CLAIMED]
_POSITION_SET = ACCEPTED[Effect.POSITION_SET]
_GROUP_PAUSED = ACCEPTED[Effect.GROUP_PAUSED]
_STILL_OWNED = REJECTED[Reason.STILL_OWNED]
_NOT_HOLDER = REJECTED[Reason.NOT_HOLDER]
_FENCED = REJECTED[Reason.FENCED]
_PAUSED = REJECTED[Reason.GROUP_PAUSED]
_REGRESSION = REJECTED[Reason.OFFSET_REGRESSION]
_UNAUTHENTICATED = REJECTED[Reason.UNAUTHENTICATED]


def tenure_floor(part: PartitionEntry) -> int | None:
    """The position a tenure starts from, recorded when a claim or a restart takeover is
    accepted: ``max(last_offset, claimed_through)``, None without a position. Its release
    can give back only what it reserved above this (property b)."""
    return None if part.last == NO_POSITION else max(part.last, part.claimed)


def _keep_lease(part: PartitionEntry) -> None:
    """The holder is being removed while its lease may still run (restart takeover,
    ReleaseGroup): remember when that lease is over by the log's clock, the moment a stale
    takeover would have been allowed (version 5, property e)."""
    end = stale_from(part.beat, part.hb)
    if end > part.fenced_until:
        part.fenced_until = end


# ---------------------------------------------------------------------- the rule table

#: What a transition is handed, for every record type alike: the partition's state (None
#: if never seen), a callable that creates it, the sender, the log time, the record's number
#: (a position, a reservation's end; -1 for a claim), its lease (0 if it declares none), what
#: else its type carries (a task's vector, a reservation's first offset, the tenure a
#: version 6 release names, both for a version 6 ReleasingTask) and its log offset.
Transition = Callable[
    [PartitionEntry | None, Callable[[], PartitionEntry], Sender, int, int, int, Any, int],
    Verdict,
]


class Rules:
    """The rule table: everything that decides a partition record's verdict, in one place.

    PROTOCOL.md's rules 1 to 7 are its methods (one each, named in PROTOCOL.md's table), the
    properties later protocol versions added to them are methods too (``carries_position``
    for a, ``gives_back`` for b, ``starts_at_resume`` for c, ``lease_runs`` for e,
    ``names_tenure`` for f, ``keeps_position`` for g, ``beats_in_tenure`` for h,
    ``task_beats_in_tenure`` for i and ``names_own_tenure`` for j), and :meth:`transitions` is the
    table that sends each record type to its rule. A world replays with one table
    (``WorldState(rules=)``, :data:`RULES` by default); the simulator's experiments hand it
    a variant that overrides some properties to show what each one prevents
    (``scenarios/sim_rules.py``). Every replayer of a log must use the same table.

    Stateless: a world passes in the state a rule reads and changes.
    """

    __slots__ = ()

    # ------------------------------------------------------------------ properties

    def carries_position(self, part: PartitionEntry, last_offset: int) -> bool:
        """Property a (version 4): a restart takeover carries at least the partition's
        position ``max(last_offset, claimed_through)``."""
        return last_offset >= max(part.last, part.claimed)

    def gives_back(self, part: PartitionEntry, last_offset: int) -> int:
        """Property b (version 4): ``claimed_through`` after the holder's release at
        ``last_offset``: its own tenure's reservations beyond it are given back, nothing
        below the position its tenure started from (``floor``)."""
        floor = part.floor
        return last_offset if floor is None else max(last_offset, floor)

    def starts_at_resume(self, part: PartitionEntry, first: int) -> bool:
        """Property c (version 4): a reservation starts exactly at the resume point
        ``max(last_offset, claimed_through) + 1`` (anywhere while there is no position)."""
        return part.last == NO_POSITION or first == max(part.last, part.claimed) + 1

    def lease_runs(self, part: PartitionEntry, now: int) -> bool:
        """Property e (version 5): a lease the log took away early (``fenced_until``) may
        still run at ``now``: a version 5 or 6 claim waits it out."""
        return now < part.fenced_until

    def names_tenure(self, part: PartitionEntry, tenure: int) -> bool:
        """Property f (version 6): a release that names ``tenure`` ends the holder's tenure
        only if it is that one."""
        return tenure == part.tenure

    def keeps_position(self, part: PartitionEntry, last_offset: int) -> bool:
        """Property g (version 6): the holder's heartbeat below the partition's
        ``last_offset`` (asked only then) renews but sets no position: in a named tenure
        (``tenure >= 0``: a version 6 claim began it), unless it is below the position the
        tenure started from (a reset: the data log lost records past the position)."""
        return part.tenure >= 0 and (part.floor is None or last_offset >= part.floor)

    def beats_in_tenure(self, part: PartitionEntry, tenure: int) -> bool:
        """Property h (version 7): a MemberHeartbeat's entry renews the holder's lease, or
        takes the partition over for a newer instance of the holder's client, only in the
        tenure it names (an unnamed tenure is never named: ``tenure`` is >= 0)."""
        return tenure == part.tenure

    def task_beats_in_tenure(self, part: PartitionEntry, tenure: int) -> bool:
        """Property i (version 8): a task's heartbeat that names its tenure renews the
        holder's lease, or takes the task over for a newer instance of the holder's client,
        only in that tenure (property h, for tasks)."""
        return tenure == part.tenure

    def names_own_tenure(self, part: PartitionEntry, sender: Sender) -> bool:
        """Property j (version 9): a NamingTenure names the tenure of its sender, if that is
        the partition's holder (the same instance) and the tenure has no name yet (begun by
        a claim of version 1 or 5, or by a restart takeover of such a tenure)."""
        return part.holder == sender and part.tenure < 0

    # ------------------------------------------------------------------ the dispatch

    def transitions(
        self, fenced: dict[str, Sender], takeovers: dict[str, Verdict]
    ) -> dict[int, Transition]:
        """Record type (``WorldState.apply_many``'s code: the type byte, or one of the
        ``T_*_V*`` codes below for the versioned records that are judged differently) ->
        the rule that judges it, for a world whose fenced instances and restart takeovers
        are ``fenced`` and ``takeovers``. Rules 0 to 3 come before, in ``apply_many``."""
        claim, heartbeat = self.claim, self.heartbeat
        release, claim_messages = self.release, self.claim_messages

        def on_heartbeat(part, create, sender, now, num, hb, vector, offset):
            return heartbeat(part, sender, now, num, hb, fenced, takeovers, vector, offset)

        def on_claim(part, create, sender, now, num, hb, extra, offset):
            return claim(part, create, sender, now, hb, fenced)

        def on_claim_v5(part, create, sender, now, num, hb, extra, offset):
            return claim(part, create, sender, now, hb, fenced, True)

        def on_claim_v6(part, create, sender, now, num, hb, extra, offset):
            return claim(part, create, sender, now, hb, fenced, True, offset)

        def on_release(part, create, sender, now, num, hb, vector, offset):
            return release(part, sender, now, num, vector)

        def on_release_v6(part, create, sender, now, num, hb, tenure, offset):
            return release(part, sender, now, num, None, tenure)

        def on_release_task_v6(part, create, sender, now, num, hb, extra, offset):
            vector, tenure = extra
            return release(part, sender, now, num, vector, tenure)

        def on_claim_messages(part, create, sender, now, num, hb, first, offset):
            return claim_messages(part, sender, now, num, first)

        member_beat = self.member_beat

        def on_member_beat(part, create, sender, now, num, hb, tenure, offset):
            return member_beat(part, sender, now, num, hb, tenure, fenced, takeovers, offset)

        task_beat = self.task_beat

        def on_task_beat_v8(part, create, sender, now, num, hb, extra, offset):
            vector, tenure = extra
            return task_beat(part, sender, now, num, hb, vector, tenure, fenced, takeovers, offset)

        name = self.name

        def on_name_v9(part, create, sender, now, num, hb, extra, offset):
            return name(part, sender, offset)

        return {
            T_HEARTBEAT: on_heartbeat,
            T_HEARTBEATING_TASK: on_heartbeat,  # version 3: with its vector
            T_CLAIMING_PARTITION: on_claim,
            T_CLAIM_V5: on_claim_v5,  # waits out a lease the log took away early
            T_CLAIM_V6: on_claim_v6,  # ... and its offset names the tenure it begins
            T_RELEASING_PARTITION: on_release,
            T_RELEASING_TASK: on_release,  # version 3: with its vector
            T_RELEASE_V6: on_release_v6,  # names the tenure it ends
            T_RELEASE_TASK_V6: on_release_task_v6,  # its vector and the tenure it ends
            T_CLAIMING_MESSAGES: on_claim_messages,  # version 4: with its first offset
            T_MEMBER_BEAT: on_member_beat,  # version 7: one entry, naming its tenure
            T_TASK_BEAT_V8: on_task_beat_v8,  # version 8: a task's, naming its tenure
            T_NAME_V9: on_name_v9,  # version 9: the holder names its tenure
        }

    # ------------------------------------------------------------------ the rules

    def fenced(self, instances: dict[str, Sender], fkey: str) -> Verdict | None:
        """Rule 1: a record whose sender (its ``fence_key``) is fenced in this world is
        rejected FENCED, whatever it is; None if the sender is not fenced."""
        return _FENCED if fkey in instances else None

    def release_group(
        self,
        parts: Iterable[PartitionEntry],
        pauses: dict[str, tuple[int, Sender]],
        group: str,
        sender: Sender,
        expiry: int,
        now: int,
        keyed: bool,
        authentic: bool,
    ) -> Verdict:
        """Rule 2: ReleaseGroup of ``group`` from ``sender`` expiring at ``expiry``; ``parts``
        are the group's partitions in this world, ``pauses`` the world's pause windows.

        A keyed group (``keyed``: it has an admin key) needs a valid tag (``authentic``; always
        true without a key) and ``expiry > now``, else UNAUTHENTICATED. Accepted: every holder of
        the group is voided (listed, sorted, in the verdict; a named tenure's holder becomes the
        partition's ``last_holder``, voided at ``now``, which only the audit reads), positions
        are kept; the group is
        paused until ``expiry`` by ``sender``, or, if ``expiry <= now``, its pause ends."""
        if not authentic or (keyed and expiry <= now):
            # forged, untagged, or a window already over at its log time (a replayed old
            # record must not void every claim again)
            return _UNAUTHENTICATED
        voided = []
        for part in parts:
            if part.holder is not None:
                voided.append((part.topic, part.partition, *part.holder))
                _keep_lease(part)
                if part.tenure >= 0:  # (audit only: the failover the next claim makes)
                    part.last_holder = part.holder
                    part.voided_at = now
                part.holder = None
                part.hb = 0
                part.floor = None
                part.tenure = -1
        if expiry > now:
            pauses[group] = (expiry, sender)
        else:  # a window already over replaces (ends) the current one
            pauses.pop(group, None)
        if not voided:
            return _GROUP_PAUSED
        return Verdict(True, effect=Effect.GROUP_PAUSED, voided=tuple(sorted(voided)))

    def paused(
        self,
        pauses: dict[str, tuple[int, Sender]],
        group: str,
        now: int,
        part: PartitionEntry | None,
        create: Callable[[], PartitionEntry],
        sender: Sender,
        typ: int,
        authentic: bool,
        position: int,
    ) -> Verdict | None:
        """Rule 3: a partition record (of type ``typ``) of a group paused at ``now``; None if
        the group is not paused (the rules after this one decide).

        Only a Heartbeat from the pause admin is accepted: POSITION_SET, ``last_offset :=
        claimed_through := position``, the holder stays none, its heartbeat interval is ignored,
        and state is created (``create()``, unheld and without position) for a partition never
        seen. With an admin key it needs a valid tag (``authentic``), else UNAUTHENTICATED.
        Anything else (task records included) is GROUP_PAUSED. A window that is over is
        forgotten here. POSITION_SET clears a task's position vector (``positions``)."""
        window = pauses.get(group)
        if window is None:
            return None
        if now >= window[0]:
            del pauses[group]  # over: queries and snapshots ignore it already
            return None
        if typ != T_HEARTBEAT or sender != window[1]:
            return _PAUSED
        if not authentic:
            return _UNAUTHENTICATED
        if part is None:
            part = create()
        part.last = part.claimed = position
        part.positions = None
        return _POSITION_SET

    def claim(
        self,
        part: PartitionEntry | None,
        create: Callable[[], PartitionEntry],
        sender: Sender,
        now: int,
        hb: int,
        fenced: dict[str, Sender],
        leases: bool = False,
        offset: int = -1,
    ) -> Verdict:
        """Rule 4: ClaimingPartition from ``sender`` declaring the lease ``hb``, at ``offset``.

        Claimable — no state (``create()`` makes it), no holder, or a holder STALE by its own
        lease — → accepted: ``sender`` holds it from ``now`` with lease ``hb``; CLAIMED, or
        TOOK_OVER_STALE naming the previous holder, which is fenced if it is another instance of
        the same client (deviation D1). Otherwise (holder fresh or unknown, ``sender`` itself
        included) STILL_OWNED. Positions are not touched; the new tenure's floor is recorded
        (:func:`tenure_floor`), and its name, the claim's ``offset`` (version 6); the
        partition's ``last_holder`` is cleared (its failover is made).

        ``leases`` (a version 5 or 6 ClaimingPartition): also STILL_OWNED while a lease the
        log took away early may still run (:meth:`lease_runs`, property e)."""
        if part is None:
            part = create()
            v = _CLAIMED
        else:
            if leases and self.lease_runs(part, now):
                return _STILL_OWNED
            h = part.holder
            if h is None:
                v = _CLAIMED
            elif freshness(now - part.beat, part.hb) is STALE:
                v = Verdict(True, effect=Effect.TOOK_OVER_STALE, previous_holder=h)
                if h[0] == sender[0] and h[1] != sender[1]:
                    # a newer instance of the same client: the old one is superseded (D1)
                    fenced[fence_key(*h)] = h
            else:
                return _STILL_OWNED
        part.holder = sender
        part.beat = now
        part.hb = hb
        part.floor = tenure_floor(part)
        part.tenure = offset
        part.last_holder = None  # (audit only) the failover is made: nothing ended is pending
        part.voided_at = None
        return v

    def heartbeat(
        self,
        part: PartitionEntry | None,
        sender: Sender,
        now: int,
        last_offset: int,
        hb: int,
        fenced: dict[str, Sender],
        takeovers: dict[str, Verdict],
        positions: Positions | None = None,
        offset: int = -1,
    ) -> Verdict:
        """Rule 5: Heartbeat from ``sender`` at ``last_offset`` declaring the lease ``hb``; a
        HeartbeatingTask is judged here the same way, with its ``positions`` vector and
        ``last_offset`` = the vector's scalar (``messages.task_last_offset``).

        - ``sender`` holds the partition: RENEWED, or RENEWED_LATE if the claim was STALE by the
          lease recorded before (a late heartbeat renews a claim nobody took);
        - the holder is another instance of ``sender``'s client, FRESH, and ``last_offset`` is at
          least the partition's position ``max(last_offset, claimed_through)`` (property a,
          version 4: a restarted instance carries what its replay shows; a woken *older*
          instance carries less and is refused): restart recovery, RESTART_TAKEOVER, ``sender``
          holds it, the old instance is fenced (``takeovers`` keeps one shared verdict per fenced
          instance: a restarted client takes over each of its partitions with it), its lease is
          kept (``fenced_until``, property e: it may be alive and hand out until it replays
          this) and the new tenure's floor is recorded, and its name, the heartbeat's ``offset``,
          when the tenure it ends had one (version 6: a version 6 claim began it, so no replayer
          of version 5 or before reads this log any further; the heartbeat lane, which only
          renews, need not pass it);
        - otherwise NOT_HOLDER.

        Property g (version 6): in a named tenure (``tenure >= 0``: a version 6 claim began it),
        a holder's heartbeat below the partition's ``last_offset`` is one that was overtaken by a
        later one of the same holder (a writer without an idempotent producer): it renews the
        lease (RENEWED or RENEWED_LATE, as ever) but sets no position, so the position a holder
        wrote never moves back.

        Accepted: ``last_beat = now``, ``last_offset`` set, lease := ``hb``, ``positions`` set
        (None for a plain Heartbeat: the vector no longer describes the position)."""
        if part is None:
            return _NOT_HOLDER
        h = part.holder
        if h == sender:
            # judged with the lease the holder declared last, renewed with the one it declares now
            v = _RENEWED_LATE if freshness(now - part.beat, part.hb) is STALE else _RENEWED
            if last_offset < part.last and self.keeps_position(part, last_offset):
                # a late heartbeat of this holder: it renews, the position stays (property g);
                # below the tenure's starting position it is no late one but a reset (the data
                # log lost records past the position): that sets the position
                part.beat = now
                part.hb = hb
                return RENEWED_LATE_KEPT if v is _RENEWED_LATE else RENEWED_KEPT
        elif (
            h is not None
            and h[0] == sender[0]
            and freshness(now - part.beat, part.hb) is FRESH
            and self.carries_position(part, last_offset)
        ):
            _keep_lease(part)
            part.floor = tenure_floor(part)
            if part.tenure >= 0:  # (a tenure begun by a version 1 or 5 claim has no name)
                part.tenure = offset
            fk = fence_key(*h)
            fenced[fk] = h
            taken = takeovers.get(fk)
            if taken is None:
                taken = Verdict(True, effect=Effect.RESTART_TAKEOVER, previous_holder=h)
                takeovers[fk] = taken
            v = taken
        else:
            return _NOT_HOLDER
        part.holder = sender  # (on renewal: the replay's cached tuple itself, for its `is` test)
        part.beat = now
        part.last = last_offset
        part.hb = hb
        part.positions = positions
        return v

    def member_beat(
        self,
        part: PartitionEntry | None,
        sender: Sender,
        now: int,
        last_offset: int,
        hb: int,
        tenure: int,
        fenced: dict[str, Sender],
        takeovers: dict[str, Verdict],
        offset: int = -1,
    ) -> Verdict:
        """Rule 5 for one entry of a version 7 MemberHeartbeat, naming ``tenure``: in the
        partition's tenure (property h, :meth:`beats_in_tenure`) it is judged exactly as
        ``sender``'s Heartbeat at ``last_offset`` (:meth:`heartbeat`): the holder's renews
        (RENEWED or RENEWED_LATE, property g), a newer instance's of the holder's client is
        a restart takeover (property a; the new tenure is named by the record's ``offset``),
        anyone else's NOT_HOLDER; in another tenure (an earlier tenure's entry that landed
        late, a takeover too, an unnamed tenure, no holder) NOT_HOLDER, nothing changes."""
        if part is None or not self.beats_in_tenure(part, tenure):
            return _NOT_HOLDER
        return self.heartbeat(part, sender, now, last_offset, hb, fenced, takeovers, None, offset)

    def task_beat(
        self,
        part: PartitionEntry | None,
        sender: Sender,
        now: int,
        last_offset: int,
        hb: int,
        positions: Positions,
        tenure: int,
        fenced: dict[str, Sender],
        takeovers: dict[str, Verdict],
        offset: int = -1,
    ) -> Verdict:
        """Rule 5 for a version 8 HeartbeatingTask, naming ``tenure``: in the task's tenure
        (property i, :meth:`task_beats_in_tenure`) it is judged exactly as ``sender``'s
        version 3 HeartbeatingTask with ``positions`` (:meth:`heartbeat`, properties a and g;
        a restart takeover's new tenure is named by the record's ``offset``); in another
        tenure (an earlier tenure's heartbeat or takeover that landed late, an unnamed
        tenure, no holder) NOT_HOLDER, nothing changes."""
        if part is None or not self.task_beats_in_tenure(part, tenure):
            return _NOT_HOLDER
        return self.heartbeat(
            part, sender, now, last_offset, hb, fenced, takeovers, positions, offset
        )

    def name(self, part: PartitionEntry | None, sender: Sender, offset: int) -> Verdict:
        """A version 9 NamingTenure from ``sender`` at ``offset`` (after rules 0', 1 and 3):
        from the holder of a tenure without a name (:meth:`names_own_tenure`, property j) →
        accepted NAMED, ``tenure := offset``; nothing else changes (the lease, the position,
        the reservations, the floor: it is the same tenure, now named). Otherwise (another
        sender, a named tenure, no holder, a partition never seen) NOT_HOLDER."""
        if part is None or not self.names_own_tenure(part, sender):
            return _NOT_HOLDER
        part.tenure = offset
        return _NAMED

    def release(
        self,
        part: PartitionEntry | None,
        sender: Sender,
        now: int,
        last_offset: int,
        positions: Positions | None = None,
        tenure: int | None = None,
    ) -> Verdict:
        """Rule 6: ReleasingPartition from ``sender`` at ``last_offset``; a ReleasingTask is
        judged here the same way, with its ``positions`` and their scalar as ``last_offset``.
        A version 6 release names the ``tenure`` it ends (None: a version 1 or 3 release, which
        names none): it is accepted only from the holder *in that tenure* (version 6, property
        f: a release that lands late, after its instance claimed the partition again, is
        NOT_HOLDER instead of ending the new tenure).

        From the holder: RELEASED, no holder (and no lease; the sender of a named tenure's
        release becomes the partition's ``last_holder``, which only the audit reads),
        ``last_beat = now``, ``last_offset := last_offset``, ``claimed_through :=
        max(last_offset, floor)`` — the holder's final
        position gives back the reservations of its own tenure beyond it (never handed out),
        and nothing an earlier tenure reserved (property b, version 4: the floor is the
        position the tenure started from) — and ``positions`` set (None for a
        ReleasingPartition). From anyone else NOT_HOLDER."""
        if part is None or part.holder != sender:
            return _NOT_HOLDER
        if tenure is not None and not self.names_tenure(part, tenure):
            return _NOT_HOLDER
        claimed = self.gives_back(part, last_offset)
        if part.tenure >= 0:  # (audit only: the failover the next claim makes; ends at ``beat``)
            part.last_holder = part.holder
        part.tenure = -1
        part.holder = None
        part.hb = 0
        part.beat = now
        part.last = last_offset
        part.claimed = claimed
        part.floor = None
        part.positions = positions
        return _RELEASED

    def claim_messages(
        self,
        part: PartitionEntry | None,
        sender: Sender,
        now: int,
        proposed: int,
        first: int | None = None,
    ) -> Verdict:
        """Rule 7: ClaimingMessages from ``sender`` reserving ``first`` (version 4; None for
        version 1) through ``proposed``.

        From the holder: a version 4 reservation must start exactly at the partition's resume
        point ``max(last_offset, claimed_through) + 1`` (any ``first`` while the partition has
        no position): property c, accepted reservations are disjoint and a writer acting on a
        stale view is refused; a version 1 reservation (an older member's) needs ``proposed >=
        claimed_through``. Accepted → MESSAGES_CLAIMED, ``claimed_through := proposed``,
        ``last_beat = now`` (a reservation is a position: ``last_offset`` becomes -1 if there
        was none; a task's position vector is cleared: it no longer describes the position);
        else OFFSET_REGRESSION. From anyone else NOT_HOLDER."""
        if part is None or part.holder != sender:
            return _NOT_HOLDER
        if proposed < part.claimed:
            return _REGRESSION
        if first is not None and not self.starts_at_resume(part, first):
            return _REGRESSION
        part.claimed = proposed
        part.beat = now
        part.positions = None
        if part.last == NO_POSITION:
            part.last = -1
        return _MESSAGES_CLAIMED


#: The production rule table (every property on): what a world replays with by default.
RULES = Rules()

#: The effects of a change of holder (claim, takeover, release): ``ownership_epoch`` moves
#: with them (a ReleaseGroup's voids and membership changes count where they are decided).
HOLDER_MOVES = (Effect.CLAIMED, Effect.TOOK_OVER_STALE, Effect.RESTART_TAKEOVER, Effect.RELEASED)
