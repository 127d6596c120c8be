"""A coordination log that lost records: the halt, and when a group may act there again.

A replay is a fold of the log; every member trusts its world because every other member
folds the same records. Two things break that without any record saying so
(docs/bounded-log.md, "A coordination log that loses records"):

- **rewound**: the log ends below what the replay already applied (an unclean leader
  election on Kafka, a broker's disk restored from an older copy). Records acknowledged and
  applied are gone; new ones reuse their offsets. A member that replayed before and one
  that starts after disagree on who holds what and where each partition resumes.
- **gap**: records were deleted before the replay applied them (truncation moved the log
  start past a cold start, or past a replay that fell behind) and no valid snapshot of the
  replayer's own key configuration covers them. The world misses the claims, reservations
  and positions they held.

Either way the member must not act on that coordination partition: the edge feeds
:class:`~.events.Halted` and the core drops what it holds there (``Revoke``, lost, no
release), forgets writes in flight there (their verdicts would come from that world) and
writes, claims and hands out nothing of it (``state.withheld`` where records are written,
``state.not_to_claim`` in claim passes, ``handout.may_hand_out`` where records are handed
out); only its membership announcements go on where a gap halted it.

**When a halted group may act again** (:class:`Regained`, fed by the edge; PROTOCOL.md,
"A coordination log that loses records"). A partition of group G coordinated in the halted
partition is determined again by the records the replay has seen after the halt once:

1. an accepted ReleaseGroup of G at an offset at or after ``trusted_from`` (the first offset
   the replay saw after the loss) voided every claim of G: no holder, in every world;
2. in that pause the admin's Heartbeat set the partition's position (``POSITION_SET``:
   ``last_offset`` and ``claimed_through`` both := the admin's), in every world alike;
3. the replay's log time is past that pause's end (``now > E``). The reset's pause is at
   least 2·HB of the group's holders (``logmarshal group reset``), so every lease the
   ReleaseGroup voided (version 5 ``fenced_until = last_beat + 2·HB + 1``, which a world
   without the lost records does not know) has ended by then, and a claim written after
   that is judged alike by a world that saw the lost records and one that did not.

What the lost records held for that partition no longer decides anything after that: the
holder was voided, the position overwritten. Not what fenced an instance: one whose replay
finds a gap in a coordination partition it wrote to stops altogether (``MemberCore._apply``,
``Halted.live``, PROTOCOL.md), as the lost records may have fenced it. Partitions the admin
did not position stay halted (their position is unknown). A rewound replay is frozen (the
tailer stops applying it), so only a restart after the admin's reset takes it up again
(docs/bounded-log.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from rationalizer import Effect, Verdict, WorldState

from .actions import Action
from .holding import lose
from .state import Key, MemberState, me

__all__ = ["Regained", "halt", "resume", "supersedes"]

log = logging.getLogger(__name__)


def supersedes(mark: tuple[str, int, int] | None, why: str, before: int) -> bool:
    """Whether a halt ``why`` found at ``before`` replaces ``mark``, the ``(why, before,
    after)`` of the one we have: halts of a coordination partition go forward only. A
    rewound partition stays so within the process; a gap gives way to a rewind and to a gap
    found at or after it, while an older gap, told late (as a new Consumer's edge tells the
    halts it found before it listened), changes nothing: answers to it are stale."""
    return mark is None or (mark[0] == "gap" and (why == "rewound" or before >= mark[1]))


def halt(st: MemberState, cp: int, mark: tuple[str, int, int], why: str, out: list[Action]) -> None:
    """The replay of ``cp`` is not a fold of the log any more (``mark``: what was lost,
    ``(why, before, after)``; the same one again, or one :func:`supersedes` says is older,
    changes nothing): drop what we hold there (lost: no release, which would act on that
    world), forget writes in flight there and releases queued there, and act on nothing of it
    until :func:`resume` names it."""
    current = st.halt_marks.get(cp)
    if current == mark or not supersedes(current, mark[0], mark[1]):
        return
    st.halt_marks[cp] = mark
    st.halted[cp] = set()
    log.info("%s stops acting on coordination partition %d: %s", me(st), cp, why)
    for held in list(st.held.values()):
        if held.cp == cp:
            lose(st, held, f"coordination partition {cp} {why}", out)
    for token, p in list(st.pending.items()):
        if p.cp == cp:
            del st.pending[token]
            if token == st.announcing:
                st.announcing = None
            if p.kind == "leave":
                st.leaving = False
    for key, entry in list(st.releases.pending.items()):
        if entry[1] == cp:
            st.releases.answered(key)
    st.stalled.discard(cp)


def resume(st: MemberState, cp: int, keys: Iterable[Key]) -> None:
    """The log determines these partitions of ``cp`` again (:class:`Regained`)."""
    trusted = st.halted.get(cp)
    if trusted is not None:
        trusted.update(keys)


class Regained:
    """Which partitions of each group the records seen after a halt determine again
    (module docstring: an accepted ReleaseGroup at or after ``trusted_from``, the admin's
    position in that pause, the pause over). Pure: the edge feeds it every chunk the halted
    replay applies (the tailer, the simulator), in log order."""

    def __init__(self, trusted_from: int) -> None:
        self.trusted_from = trusted_from
        #: group -> end (log ms) of the pause of its latest ReleaseGroup seen after the halt
        #: (None: a ReleaseGroup that paused nothing)
        self._pause: dict[str, int | None] = {}
        #: group -> partition -> end of the pause in which the admin positioned it
        self._positioned: dict[str, dict[Key, int]] = {}

    def note(
        self,
        world: WorldState,
        offsets: Sequence[int],
        keys: Sequence[bytes | None],
        verdicts: Sequence[Verdict | None],
    ) -> None:
        """A chunk ``world`` applied (its records' offsets and keys, and their verdicts)."""
        for offset, key, verdict in zip(offsets, keys, verdicts, strict=True):
            if verdict is None or not verdict.accepted or offset < self.trusted_from:
                continue
            if key is None:
                continue
            if verdict.effect is Effect.GROUP_PAUSED:
                group = key.decode("utf-8", "replace")
                # pause_end, not paused_until: the chunk may have run past the pause's end
                self._pause[group] = world.pause_end(group)
            elif verdict.effect is Effect.POSITION_SET:
                parsed = _partition_key(key)
                if parsed is None:
                    continue
                group, partition = parsed
                end = self._pause.get(group)
                if end is not None:  # a pause this replay saw begin, after the halt
                    self._positioned.setdefault(group, {})[partition] = end

    def trusted(self, group: str, now: int) -> frozenset[Key]:
        """The partitions of ``group`` determined again at the replay's log time ``now``."""
        positioned = self._positioned.get(group)
        if not positioned:
            return frozenset()
        return frozenset(key for key, end in positioned.items() if now > end)


def _partition_key(key: bytes) -> tuple[str, Key] | None:
    """``group/topic/partition`` (group ids may contain ``/``, topics cannot)."""
    try:
        group, topic, partition = key.decode("utf-8").rsplit("/", 2)
        return group, (topic, int(partition))
    except (UnicodeDecodeError, ValueError):
        return None
