"""The simulator's upgrade schedule (issue 33 item 8; PROTOCOL.md, "Upgrading a running
group" and "Bounded coordination log"): the group is upgraded member by member through
protocol versions 4, 5, 6, 7 and 9 while snapshots are published and the log truncated.

- **Who.** About one seed in five: partition seeds with faults, without a rewind, that the
  bounded-log schedule did not take (drawn from ``random.Random(f"upgrade/{seed}")``, so the
  bounded seeds and every other seed keep their schedules). An upgrade seed gets the
  bounded-log schedule too (:mod:`scenarios.sim_bounded`: another group's busy writer,
  publishers, truncation, an outage and cold starts) and 20..40·HB more of faults, so two
  rolling restarts fit in them.
- **Caps.** Members start capped at 4 (``CoreOptions.protocol_version``: version 1 claims and
  releases). An operator's rolling restart replaces each client's instance by a new one
  capped at 5 (version 5 claims), one client after the other (HB/2..3·HB apart; the old
  instance is stopped gracefully before or after the new one starts, or killed, or lingers
  for up to 2·HB), then a second rolling restart brings every client to 6, a third to 7
  (MemberHeartbeats) and a fourth to 9 (the newest: a tenure without a name is named). A
  client that joins or restarts meanwhile gets the cap of the rollout under way.
- **Named at the end.** A tenure a claim of version 1 or 5 began keeps no name through the
  restart takeovers of killed instances; a member capped at 9 names it (NamingTenure,
  property j). Most faults move partitions (a join, a leave, a freeze past the lease, a kill
  nobody restarts), and the claim that moves one names it, so in a share of the upgrade
  seeds (``TAKEOVERS_SHARE``, drawn from a generator of their own) from the rollout to 5 on
  every instance the operator replaces is killed, and every fault is a restart whose old
  instance dies at once: the group upgraded by killed instances the version was made for,
  where the tenures of versions 4 and 5 reach cap 9 without a name. A partition that a
  member capped at 9 held without a name when the fourth rollout was done or when the
  faults stopped, and that the same instance, running, still holds without a name 2·HB
  after the faults, is a violation (``--without own_tenure`` shows it).
- **Publishers of every version.** The in-tree code replays with version 9 rules only, so a
  publisher of version 4 or 5 is emulated: it publishes what a replayer of that version
  could have published. Its replay stops at the first record of a later version (a version
  4 replayer stops at byte 5..15, a version 5 one at 6..15), and its snapshot holds what its
  version's world holds: version 4 keeps no lease taken away early (property e), neither
  keeps a named tenure or a last holder (version 6), so the world is dumped in the image
  version that holds it. The record names rules 4 or 5, or (half the version 5 publishers)
  is of record version 1, which names none. A publishing instance capped below 6 publishes
  as its version's release (60%) or as the in-tree code does (rules 9); a member capped at 6
  or more always as the in-tree code. Publishers truncate with the in-tree rule (every configuration
  in use keeps two valid snapshots); the old configurations' snapshots keep being in use.
- **Rule 1** (PROTOCOL.md, "Bounded coordination log", Restoring): a replayer restores only a
  snapshot of its own rules. ``--without snapshot-rules`` removes it: a cold start restores
  the newest snapshot of its key configuration whatever its rules (:func:`load_any_rules`).

Every bounded seed also checks that a replay that started from a snapshot judges every
record as the full replay of the log does (:meth:`scenarios.sim_bounded.Bounded.agree`): the
disagreement of the F1 split brain (issue 33), which a version 4 snapshot, without its
leases, causes once a version 5 claim meets a lease the log took away early.
"""

from __future__ import annotations

import random
from typing import Any

import attrs

from logmarshal._coordlog import Restored
from logmarshal.core import Close
from rationalizer import SnapshotError, WorldState
from rationalizer._snapshot import dump, load
from rationalizer._snapshot_record import (
    encode_snapshot_record,
    fingerprint,
    is_announcement_key,
    parse_snapshot_record,
    restore_snapshot,
)
from rationalizer._state import NO_TIME

# scenarios.sim's Sim and _Instance are not imported (sim imports this module, and the import
# graph allows no circle): aliases of Any, as in scenarios.sim_bounded.
Sim = Any
_Instance = Any

__all__ = ["UPGRADE_SHARE", "Upgrade", "load_any_rules"]

#: the share of the eligible seeds the bounded-log schedule left that upgrade (about one
#: seed in five of all seeds)
UPGRADE_SHARE = 0.6
#: the share of upgrade seeds whose instances, from the rollout to 5 on, are only ever
#: replaced by restart takeovers (module docstring, "Named at the end")
TAKEOVERS_SHARE = 0.4
#: from this rollout on, a takeovers seed's instances are replaced by takeovers only
TAKEOVERS_FROM = 5
#: the versions a group is upgraded through (not 8: version 8 changes only what a task's
#: heartbeat is, and upgrade seeds claim partitions, for which a member capped at 8 writes
#: what one capped at 7 does)
VERSIONS = (4, 5, 6, 7, 9)
FIRST, LAST = VERSIONS[0], VERSIONS[-1]
#: a member capped at this version or later publishes as the in-tree code (rules 9); below
#: it, as its own version's release too (emulated: versions 4 and 5)
OLDEST_IN_TREE = 6
#: a publisher capped below 6 publishes as its own version's release this often
OLD_PUBLISHER = 0.6
#: version bytes a replayer of version N stops at are N+1..15 (PROTOCOL.md "Versions to
#: come stop replay")
_LAST_VERSION_BYTE = 15

Record = tuple[int, bytes | None, bytes | None]


def _restore_as_published(snap: Any, cp: int, keys: dict[str, bytes]) -> WorldState:
    """Restore ``snap`` with every check but its rules: as if the replayer's rules were the
    ones it names (a record version 1 snapshot names none). What rule 1 forbids a cold
    start, and what an older replayer does with its own snapshots."""
    return restore_snapshot(snap, cp, keys, rules=snap.rules)


def _of_keys(cp: int, records: list[Record], keys: dict[str, bytes]) -> list[tuple[int, int, Any]]:
    """``(covered, offset, snapshot)`` of every parsable snapshot of ``cp`` published under
    this key configuration, whatever its rules."""
    fp = fingerprint(keys)
    out = []
    for offset, key, value in records:
        if key is None or is_announcement_key(key):
            continue
        try:
            snap = parse_snapshot_record(key, value)
        except SnapshotError:
            continue
        if snap.coord_partition == cp and fingerprint(snap.keyed_groups) == fp:
            out.append((snap.covered, offset, snap))
    out.sort(key=lambda c: (c[0], c[1]), reverse=True)
    return out


def load_any_rules(
    cp: int, keys: dict[str, bytes], earliest: int, records: list[Record]
) -> Restored | None:
    """A cold start without rule 1: the newest valid snapshot of ``cp`` of this key
    configuration whose tail is stored, whatever rules its publisher applied."""
    for covered, offset, snap in _of_keys(cp, records, keys):
        if covered + 1 < earliest:
            continue
        try:
            world = _restore_as_published(snap, cp, keys)
        except SnapshotError:
            continue
        return Restored(world, offset, covered)
    return None


def old_image(world: WorldState, version: int) -> bytes:
    """``world``'s snapshot bytes as a replayer of ``version`` (4 or 5) would have written
    them: without what only later versions keep (version 5's leases, version 6's named
    tenures, last holders and halted groups), in the image version that holds the rest."""
    image = load(world.to_bytes())
    for part in image.partitions:
        if version < 5:
            part.fenced_until = NO_TIME
        part.tenure = -1
        part.last_holder = None
        part.voided_at = None
    return dump(attrs.evolve(image, halted_groups={}))


@attrs.define
class _Fold:
    """An emulated older replayer's fold of one coordination partition."""

    world: WorldState
    #: it met a record of a later version: its replay stopped there
    stopped: bool = False


class Upgrade:
    """The upgrade schedule of one seed (module docstring)."""

    def __init__(self, sim: Sim, rng: random.Random, hb: int, takeovers: bool = False) -> None:
        self.sim = sim
        self.rng = rng
        self.hb = hb
        #: from the rollout to 5 on, instances are replaced by restart takeovers only
        #: (:meth:`takeovers_only`)
        self.takeovers = takeovers
        # room for four rolling restarts inside the faults (the group then settles as ever)
        more = rng.randint(30, 60) * hb
        self.begin = rng.randint(hb, max(hb, sim.fault_ms // 2))
        sim.fault_ms += more
        sim.end_ms += more
        sim.balanced_ms += more
        #: the cap the rollout under way gives: new clients and restarts get it
        self.target = FIRST
        self.caps: dict[str, int] = {}
        #: instance -> the version it publishes as (4, 5 or 6), and whether as record version 1
        self.publishes_as: dict[tuple[str, str], int] = {}
        self.v1: set[tuple[str, str]] = set()
        self.folds: dict[tuple[tuple[str, str], int], _Fold | None] = {}
        self.keep_at: dict[tuple[tuple[str, str], int], int] = {}
        self.restarts = 0
        self.rollouts = 0
        self.old_snapshots = 0
        #: cold starts that passed over a newer snapshot of other rules (rule 1 at work)
        self.passed_over = 0
        #: partition -> its holder (a running member capped at 9) when the last rollout was
        #: done or the faults stopped, its tenure without a name (:meth:`unnamed_held`)
        self.unnamed: dict[tuple[str, int], tuple[str, str]] = {}

    @classmethod
    def drawn(cls, sim: Sim, seed: int, hb: int) -> Upgrade | None:
        """This seed's upgrade schedule, if its own generator gives it one."""
        rng = random.Random(f"upgrade/{seed}")
        if rng.random() >= UPGRADE_SHARE:
            return None
        # a generator of its own: the other upgrade seeds keep their schedules
        takeovers = random.Random(f"upgrade-takeovers/{seed}").random() < TAKEOVERS_SHARE
        return cls(sim, rng, hb, takeovers)

    def takeovers_only(self) -> bool:
        """Whether an instance leaves only by a restart takeover now (a takeovers seed,
        from the rollout to 5 on): no fault or operator moves a partition to another client,
        so a tenure a version 1 or 5 claim began keeps no name until a member capped at 9
        names it."""
        return self.takeovers and self.target >= TAKEOVERS_FROM

    # -- caps and rolling restarts -------------------------------------------------------------

    def cap_for(self, client_id: str) -> int:
        """The cap a new instance of ``client_id`` starts with."""
        return self.caps.setdefault(client_id, self.target)

    def start(self) -> None:
        sim = self.sim
        sim.at(self.begin, lambda: self.rollout(VERSIONS[1]))
        sim.at(sim.fault_ms, lambda: self.unnamed.update(self.unnamed_held()))
        sim.at(sim.fault_ms + 2 * self.hb, self.check_named)

    def unnamed_held(self) -> dict[tuple[str, int], tuple[str, str]]:
        """Partitions a running member capped at 9 holds in a tenure without a name, once
        the last rollout is done (before it, members capped below 9 may take such tenures
        over): partition -> that member."""
        sim = self.sim
        if self.target != LAST or self.rollouts < len(VERSIONS) - 1:
            return {}
        running = {
            i.me: i
            for i in sim.live()
            if i.state == "alive" and not i.core.fenced and not i.core.closing
            and i.core.options.protocol_version >= LAST
        }  # fmt: skip
        out = {}
        for cp, world in enumerate(sim.oracle):
            for state in world.partitions(sim.group):
                inst = running.get(state.holder) if state.holder is not None else None
                if inst is None or state.tenure is not None:
                    continue
                if cp not in inst.halted and cp not in inst.gapped:
                    out[(state.topic, state.partition)] = state.holder
        return out

    def check_named(self) -> None:
        """2·HB after the faults stopped (every member thawed, every write landing): a
        partition that a running member capped at 9 held without a name when the last
        rollout was done or the faults stopped, and still does, was never named (property
        j; ``--without own_tenure``). The same instance holding it without a name is the
        same tenure: a new tenure of a member capped at 9 is named by its claim."""
        still = self.unnamed_held()
        left = sorted(k for k, who in self.unnamed.items() if still.get(k) == who)
        self.sim.note(
            f"NAMED CHECK: {len(self.unnamed)} without a name when the last rollout was done "
            "or the faults stopped"
        )
        if left:
            self.sim.checks.fail(
                self.sim.now,
                f"tenures without a name held by members capped at {LAST} for 2·HB after the "
                f"faults: {left}",
            )

    def rollout(self, version: int) -> None:
        sim = self.sim
        if not sim.in_faults():
            return
        self.target = version
        sim.note(f"ROLLING RESTART to protocol version {version}")
        self.step(version)

    def step(self, version: int) -> None:
        """Restart the next client still capped below ``version``; then the next one."""
        sim = self.sim
        if not sim.in_faults():
            return
        behind = sorted(
            {i.client_id for i in sim.live() if i.core.options.protocol_version < version}
        )
        if not behind:
            self.rollouts += 1
            sim.note(f"ROLLING RESTART to {version} done")
            if version == LAST:
                self.unnamed.update(self.unnamed_held())
            if version < LAST:
                pause = self.rng.randint(self.hb, 3 * self.hb)
                after = VERSIONS[VERSIONS.index(version) + 1]
                sim.at(sim.now + pause, lambda: self.rollout(after))
            return
        cid = behind[0]
        self.caps[cid] = version
        old = [i for i in sim.live() if i.client_id == cid]
        self.restarts += 1
        if self.takeovers_only():
            how = "kill"  # (one that lingered could move the position: the takeover refused)
        else:
            how = self.rng.choice(("stop-first", "surge", "kill", "linger"))
        sim.note(f"OPERATOR restarts {cid} capped at {version} ({how})")
        if how == "stop-first":  # SIGTERM, the new instance once the old one is gone
            for inst in old:
                sim.step(inst, Close())
                sim.at(sim.now + self.rng.randint(0, self.hb), lambda i=inst: sim.kill(i))
            sim.at(sim.now + self.rng.randint(0, self.hb), lambda: self._start(cid))
        else:
            self._start(cid)
            for inst in old:
                if how == "kill":
                    sim.kill(inst)
                elif how == "surge":  # SIGTERM after the new one started
                    later = sim.now + self.rng.randint(0, self.hb)
                    sim.at(later, lambda i=inst: sim.step(i, Close()))
                    sim.at(later + self.hb, lambda i=inst: sim.kill(i))
                else:  # it lingers, frozen or not, and dies
                    sim.at(sim.now + self.rng.randint(0, 2 * self.hb), lambda i=inst: sim.kill(i))
        gap = self.rng.randint(self.hb // 2, 3 * self.hb)
        sim.at(sim.now + gap, lambda: self.step(version))

    def _start(self, cid: str) -> None:
        if self.sim.in_faults():
            self.sim.join(cid)

    # -- publishers of every version -------------------------------------------------------------

    def joined(self, inst: _Instance) -> None:
        """Draw the version a new instance publishes as (if it is a publisher)."""
        cap = inst.core.options.protocol_version
        old = cap < OLDEST_IN_TREE and self.rng.random() < OLD_PUBLISHER
        version = cap if old else LAST
        self.publishes_as[inst.me] = version
        if version == 5 and self.rng.random() < 0.5:
            self.v1.add(inst.me)

    def publishes_old(self, inst: _Instance) -> bool:
        return self.publishes_as.get(inst.me, LAST) < LAST

    def _rules(self, inst: _Instance) -> int | None:
        return None if inst.me in self.v1 else self.publishes_as[inst.me]

    def housekeeping(self, inst: _Instance) -> None:
        """An emulated older publisher: keep its fold up with its replay, and publish it
        when it covers more than its configuration's newest snapshot by SNAP_EVERY/2, or
        its configuration has fewer than two; then truncate (the in-tree rule)."""
        sim = self.sim
        bounded = sim.bounded
        keys = bounded.g_keys
        rules = self._rules(inst)
        version = self.publishes_as[inst.me]
        for cp in range(sim.ncoord):
            key = (inst.me, cp)
            if sim.now < self.keep_at.get(key, 0) or inst.applied[cp] < 0:
                continue
            if cp in inst.gapped or cp in inst.halted:
                continue
            self.keep_at[key] = sim.now + bounded.keep_every
            fold = self._fold(inst, cp, version, rules)
            if fold is None:
                continue
            covered = fold.world.applied_through
            mine = [c for c, _, s in _of_keys(cp, bounded.records(cp), keys) if s.rules == rules]
            if covered < 0 or (mine and covered <= mine[0]):
                continue
            if len(mine) >= 2 and covered - mine[0] < 10:
                continue
            world = WorldState.from_bytes(old_image(fold.world, version), admin_keys=keys)
            bounded.put(cp, *encode_snapshot_record(world, cp, keys, rules=rules))
            self.old_snapshots += 1
            said = "record version 1" if rules is None else f"rules {rules}"
            sim.note(
                f"{inst.me} publishes as version {version} ({said}) a snapshot of cp{cp} "
                f"covering {covered}{' (its replay stopped)' if fold.stopped else ''}"
            )
            bounded.truncate(cp, keys, f"{inst.me} (version {version})")

    def _fold(self, inst: _Instance, cp: int, version: int, rules: int | None) -> _Fold | None:
        """The older replayer's fold of ``cp``, brought up to where ``inst``'s replay is (or
        to the first record of a later version); None where it cannot replay (the log start
        is gone and no snapshot of its own reaches it: an older replayer halts there)."""
        sim = self.sim
        bounded = sim.bounded
        key = (inst.me, cp)
        start = bounded.start[cp]
        fold = self.folds.get(key)
        if key in self.folds and fold is None:
            return None
        if fold is not None and fold.world.applied_through + 1 < start and not fold.stopped:
            fold = None  # the log went on below it: start again
        if fold is None:
            fold = self._start_fold(cp, start, rules)
            self.folds[key] = fold
            if fold is None:
                return None
        log = sim.log[cp]
        off = fold.world.applied_through + 1
        while not fold.stopped and off <= inst.applied[cp] and off < len(log):
            ts, k, value = log[off]
            if value is not None and len(value) >= 2 and version < value[0] <= _LAST_VERSION_BYTE:
                fold.stopped = True
                break
            fold.world.apply(off, ts, k, value)
            off += 1
        return fold

    def _start_fold(self, cp: int, start: int, rules: int | None) -> _Fold | None:
        bounded = self.sim.bounded
        keys = bounded.g_keys
        for covered, _, snap in _of_keys(cp, bounded.records(cp), keys):
            if snap.rules != rules or covered + 1 < start:
                continue
            try:
                world = _restore_as_published(snap, cp, keys)
            except SnapshotError:
                continue
            restored = WorldState.from_bytes(
                world.to_bytes(), admin_keys=keys, rules=self.sim.rules
            )
            return _Fold(restored)
        return _Fold(self.sim.world()) if start == 0 else None

    # -- cold starts ----------------------------------------------------------------------------

    def cold_start(self, cp: int, start: int, restored: Restored | None) -> None:
        """Count a cold start that passed over a newer snapshot of other rules."""
        bounded = self.sim.bounded
        floor = -1 if restored is None else restored.covered
        if any(
            covered > floor and covered + 1 >= start and snap.rules != LAST
            for covered, _, snap in _of_keys(cp, bounded.records(cp), bounded.g_keys)
        ):
            self.passed_over += 1

    def summary(self) -> tuple[int, int, int, int]:
        return self.rollouts, self.restarts, self.old_snapshots, self.passed_over
