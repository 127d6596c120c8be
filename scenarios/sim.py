"""Deterministic simulation of a consumer group (docs/architecture.md, "Deterministic simulation").

    python -m scenarios.sim --seeds 1000            # seeds 0..999, summary
    python -m scenarios.sim --seed 42 --trace       # replay one seed and print its trace

One process, one thread: a seeded scheduler (``random.Random(seed)``) interleaves members
running the real :class:`logmarshal.core.MemberCore` over real ``rationalizer.WorldState``
replays of a simulated ``__marshal`` whose append time is the simulated clock (records are
encoded and decoded with the real codec and placed with the real coordination-partition
choice). Faults: kill, freeze past 2·HB and thaw, restart under the same client_id (the old
instance sometimes lingers as a zombie), joins and graceful leaves, delayed / dropped /
duplicated writes, writes that land but report failure, lost answers. After the faults stop
the group settles and the invariants of :mod:`scenarios.sim_checks` are judged.

As unkind as real processes (docs/architecture.md, "Deterministic simulation"; the schedules are
those of docs/protocol-notes.md). The faults below draw from a second generator
(``random.Random(f"unkind/{seed}")``), so a seed that meets none of them keeps its schedule:

- **Thaw in any order.** A thawed instance runs what was postponed while it was frozen
  (its tick and polls, its replay, answers) in a seeded random order: it may tick, heartbeat
  and hand out before its replay moved. Most thaws also wake with a stale replay: for
  HB/2..2·HB its replay sees nothing newer than the moment it froze (a VM whose fetch answers
  are stale on waking, the answer in flight fetched again).
- **A catch-up answer from before a stall** (``--stale-answers``, off by default, its own
  generator ``random.Random(f"stale-answers/{seed}")``): half the catch-up answers (to
  ``CatchUp``) are built, then the instance freezes for 2·HB+1..5·HB before it steps them
  (a process stopped between its replay reaching the ends it looked up and its step); they
  carry when those ends were looked up (``Replayed.ends_at``), the core's "fresh-ends"
  refuses them after the stall it then finds.
- **A write reported failed lands later.** A dropped write (its ``WriteFailed`` comes after
  the timeout) may still land 1..3·HB after that failure was reported. Two transports:
  (i) default, as an idempotent producer guarantees: per (instance, coordination partition)
  FIFO: every write lands after the writes that instance sent to that partition before it,
  so a late write holds back the later ones; (ii) ``--without idempotent-writes``: each
  write lands after its own delay (0..max_delay), so writes overtake each other and the
  late one (the simulator's first transport). An upgrade seed keeps transport (i) unless
  ``ordered-upgrades`` is removed as well: records of caps below 7 name no tenure, and no
  rule can tell one that lands late (PROTOCOL.md, "What a cap below 7 leaves open"), so an
  upgrade through them needs the ordered transport logmarshal's writers always are.
- **Two instances of one client overlap** (the zombie schedule, most AMO seeds): an
  instance that holds a partition freezes for 5..9·HB; a new instance of its client_id
  starts while it is frozen (mostly after its claims went stale, so it is not fenced), a
  third client joins (it takes stale claims) and leaves gracefully 3..6·HB in, and the old
  instance thaws while the new one runs; half the time it then closes gracefully and a
  fourth client joins (the first schedule of docs/protocol-notes.md).
- **The reset race.** An admin writes a ``ReleaseGroup`` (pause 2..5·HB) to every
  coordination partition and position heartbeats (to the earliest offset, to "current" as
  read before the pause landed, shifted back, or to the latest) while members are active.
  The checks allow what the admin moved (:mod:`scenarios.sim_checks`).
- **The log goes back** (its own generator, ``random.Random(f"rewind/{seed}")``, about
  one partition seed in five with faults): a coordination partition loses its last 1..100
  records, acknowledged and applied (an unclean leader election on Kafka), and new writes
  reuse their offsets. A replay that applied a lost record sees it at its next step (the
  record at the offset it applied last is not the one it applied, or the log ends below
  it: on a real cluster the fetch after the leader change), stops (``Halted``), and an
  operator restarts that instance 2..6·HB later. The checks count the loss as a reset of
  the positions there to what the log now says (members that never saw the lost records
  resume there); what they still forbid is a member acting on a world the log no longer
  holds. ``--without rewind-check`` removes the detection: replays take the reused
  offsets below what they applied as re-deliveries (what ``Tailer`` did before).

- **Snapshots, truncation and cold starts** (:mod:`scenarios.sim_bounded`, its own
  generator ``random.Random(f"bounded/{seed}")``, about one seed in five: partition seeds with
  faults): a second group of another replay configuration (keyed where the checked group is
  not, or the other way round) shares the coordination partitions, publishes snapshots and
  truncates; so do some of the checked group's members; the group stops and comes back, and
  its cold starts may come after a truncation. ``--without announce`` removes the
  announcements of replay configurations, ``--without gap-refusal`` the cold-start refusal.
  A world restored from a snapshot must be the world of the log's replay through the offset
  it covers, and judge every later record as that replay does.
- **User code seeks, and the data log moves under the group** (``--seeks``, off by
  default; :mod:`scenarios.sim_seeks`, its own generator ``random.Random(f"seeks/{seed}")``):
  running instances seek held partitions (to anywhere from the log start to past its end),
  retention moves a data partition's start up, an unclean election cuts its tail, one seed
  in three resets "latest"; a refused fetch is answered with the bounds read after it.
- **Kafka's committed offsets start partitions with no position** (``--mirror``, off by
  default; :mod:`scenarios.sim_mirror`, its own generator): the members' offsets mirrors
  write late, some reads answer late, and half the seeds move from Kafka consumer groups.
- **User code gives the end of a batch back** (``--give-backs``, off by default; AMO seeds;
  its own generator ``random.Random(f"give-back/{seed}")``): a hand-out is, one time in
  five during the faults, only partly delivered: its first records reach user code and the
  rest goes back under the hand-out's number (``MemberCore.give_back``), as ``Consumer.run``
  does when its handler fails for good or is stopped; half those times the member then
  closes (its client starts again), otherwise the rest goes back at once or up to HB later
  (the Consumer's next poll). And user code sometimes tries to give back the end of an
  earlier batch, which must be refused; ``--without give-back-guard`` takes it, and the
  AMO check finds the records handed out twice.
- **Upgrades** (:mod:`scenarios.sim_upgrade`, its own generator
  ``random.Random(f"upgrade/{seed}")``, about one seed in five: eligible seeds the
  bounded-log schedule left, which it then gets too): members start capped at protocol
  version 4, two rolling restarts bring them to 5, then 6, and snapshot publishers of every
  version (4 and 5 emulated) publish and truncate. ``--without snapshot-rules`` removes rule 1
  (a replayer restores only a snapshot of its own rules).

Each safety fix can be removed (``--without FIX[,FIX...]``, ``all-amo`` for all of them):
the world's ``takeover_position`` (rule a), ``release_floor`` (rule b),
``reservation_start`` (rule c), ``fenced_lease`` (property e, version 5),
``release_tenure`` (property f, version 6: a release ends only the tenure it names),
``late_heartbeat`` (property g, version 6: a holder's late heartbeat does not move its
position back), ``member_tenure`` (property h, version 7: a MemberHeartbeat's entry counts
only in the tenure it names), ``task_tenure`` (property i, version 8: so does a task's
heartbeat), ``own_tenure`` (property j, version 9: the holder of a tenure without a name
names it; found by the upgrade seeds' check that such tenures end up named); the core's
``surprise``, ``stall``, ``fresh-ends`` (seen only with
``--stale-answers``) and ``reserved-confirm`` (an AMO heartbeat confirms its reservation
only once the log holds it: seen in upgrade seeds with ``idempotent-writes`` and
``ordered-upgrades`` removed, where a heartbeat naming no tenure, written by a member capped
below 7, lands late and sets the position back), ``given-up`` (a tenure whose release the
member gave up is left to lapse, not taken up again: a late attempt of the release would end
it under the member);
``restart-fix`` (the core's re-read after a restart takeover), ``idempotent-writes``
(transport ii), ``ordered-upgrades`` (transport ii in upgrade seeds too) and
``start-check`` (``--seeks --epochs``: a start after a cut below it is not told,
:mod:`scenarios.sim_seeks`).
``--without-restart-fix`` is the whole restart-bug experiment (an AMO restart takeover that
resumes where the position was read before it, handing a batch out twice): ``restart-fix``
plus rule a, rule c and ``surprise``, each of which alone now stops that bug, and
``reserved-confirm``, which stops it too where members are capped below 7 (as the seeds that
show it: a heartbeat overtaking its reservation is how that batch was confirmed).

Half the ALO seeds claim *tasks* (docs/streams.md) instead of partitions: partition p of the task
``t`` is one claim under which partition p of the source topics ``a`` and ``b`` is read, and
its heartbeats and releases carry both positions.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import heapq
import logging
import operator
import random
import sys
import time
from bisect import bisect_right
from collections.abc import Callable

import attrs

from logmarshal.core import (
    Bounds,
    CatchUp,
    Close,
    Closed,
    CoreOptions,
    Fetch,
    Fetched,
    Halted,
    HandOut,
    LookUp,
    MemberCore,
    NoStart,
    Poll,
    Replayed,
    Revoke,
    Tick,
    Write,
    WriteFailed,
    Written,
)
from logmarshal.core.state import CORE_SWITCHES, SharedTargets
from rationalizer import (
    ClaimingMessages,
    Heartbeat,
    ReleaseGroup,
    Verdict,
    WorldState,
    coordination_partition,
    decode,
    encode,
    sign,
)

from .sim_bounded import Bounded
from .sim_checks import Checks
from .sim_mirror import Mirror
from .sim_rules import PROPERTIES, rules_without
from .sim_seeks import UserHand
from .sim_upgrade import Upgrade

__all__ = ["FIXES", "Result", "parse_without", "run_seed"]

log = logging.getLogger(__name__)

GROUP = "g"
#: the claim unit's name: the topic, or (tasks) the task whose sources are TASK_SOURCES
TOPIC = "t"
TASK_SOURCES = ("a", "b")
HB = 100  # ms
#: after the faults stop, the group must be balanced within this many HB (a member killed
#: late is rejoined up to 3·HB later, its lapsed partitions move 2·HB after that) ...
BALANCED_AFTER = 10
#: ... and then stay still (no partition moves) for this many HB
STEADY = 20

Key = tuple[str, int]

#: fixes a WorldState can be built without: properties of the rules its rule table drops
#: (``WorldState(rules=sim_rules.rules_without(...))``)
WORLD_FIXES = frozenset(PROPERTIES)
#: fixes a MemberCore can be built without (``MemberCore(_without=...)``; "retake" is the
#: restart experiment's, not one of them)
CORE_FIXES = CORE_SWITCHES - {"retake"}
#: ``--give-backs``: the share of hand-outs only partly delivered, the rest given back
GIVE_BACK_SHARE = 0.2
#: every fix ``--without`` can remove; ``all-amo`` stands for all of them
FIXES = (
    WORLD_FIXES
    | CORE_FIXES
    | {
        "restart-fix",
        "idempotent-writes",
        "ordered-upgrades",
        "rewind-check",
        "landed-below",
        "announce",
        "gap-refusal",
        "snapshot-rules",
        "start-check",
    }
)
#: what ``fix=False`` / ``--without-restart-fix`` removes: the restart bug (module docstring)
#: needs all of them
RESTART_BUG_EXPERIMENT = frozenset(
    {"restart-fix", "takeover_position", "reservation_start", "surprise", "reserved-confirm"}
)
#: the pause admin of the reset race
ADMIN = ("admin", "a1")


@attrs.define
class _Instance:
    client_id: str
    instance_id: str
    core: MemberCore
    worlds: list[WorldState]
    state: str = "alive"  # alive | frozen | dead
    postponed: list[Callable[[], None]] = attrs.field(factory=list)
    #: last offset of each coordination partition this instance's replay applied
    applied: list[int] = attrs.field(factory=list)
    #: how far (ms) this instance's replay trails the log (fetch latency of the replay)
    lag: int = 0
    #: the replay it shares (``Sim.shared_replay``), None: its own
    shared: _Replay | None = None
    #: what its core held after its last step (``Sim.indexed_checks``)
    indexed: set[tuple[str, int]] = attrs.field(factory=set)
    #: when it was frozen (None: running, or frozen by a scripted stage)
    frozen_at: int | None = None
    #: woken with a stale replay: until ``stale_until`` it sees no record after this time
    horizon: int | None = None
    stale_until: int = 0
    #: the stale-answer schedule: 1 once it froze holding catch-up answers, which count for
    #: nothing after its stall (until another answer at the end it must write nothing:
    #: ``Sim._check_held``), 2 while those are stepped, 0 otherwise
    held_answers: int = 0
    #: when its core last stepped
    last_step_at: int | None = None
    #: per coordination partition, the record (the log's own tuple) at the offset its
    #: replay applied last: another object there means the log went back
    last_seen: list[object | None] = attrs.field(factory=list)
    #: coordination partitions whose replay stopped because the log went back
    halted: set[int] = attrs.field(factory=set)
    #: coordination partitions that lost records this instance's replay applied (or its
    #: writes' answers named), until its replay's next step there (it could not know before)
    unaware: set[int] = attrs.field(factory=set)
    #: per coordination partition, the records its writes' answers said landed at an
    #: offset its replay has not reached: (key, value) by offset (another record there means
    #: the log lost the write, and the verdict there is not its)
    own: list[dict[int, tuple[bytes, bytes]]] = attrs.field(factory=list)
    #: coordination partitions whose replay found records deleted unseen (a gap, halted)
    gapped: set[int] = attrs.field(factory=set)
    #: per gapped coordination partition, the partitions an admin reset determined again
    resumed: dict[int, set[tuple[str, int]]] = attrs.field(factory=dict)

    @property
    def me(self) -> tuple[str, str]:
        return (self.client_id, self.instance_id)


#: a record of the simulated log, (append time, key, value): its append time
_append_time = operator.itemgetter(0)


@attrs.define
class _Replay:
    """One replay shared by the instances of equal lag (:attr:`Sim.shared_replay`)."""

    worlds: list[WorldState]
    applied: list[int]
    #: the group targets its instances compute once between them
    targets: SharedTargets = attrs.Factory(SharedTargets)


@attrs.frozen
class Result:
    seed: int
    mode: str  # alo | amo, "+tasks" when the seed claims tasks
    violations: tuple[str, ...]
    sim_ms: int
    steps: int
    trace: tuple[str, ...]
    #: with the bounded-log schedule: (truncations, gaps found), else None
    bounded: tuple[int, int] | None = None
    #: with the upgrade schedule: (rolling restarts done, restarts, old-rules snapshots,
    #: cold starts that passed one over), else None
    upgrade: tuple[int, int, int, int] | None = None
    #: positions moved back where the protocol allows it (not violations): by restart
    #: takeovers, and by late heartbeats that name no tenure (:mod:`scenarios.sim_checks`)
    rewinds: tuple[int, int] = (0, 0)
    #: with the user-hand schedule (``--seeks``): (seeks, seeks refused, retentions, tail
    #: cuts, fetches refused out of range, cuts below a reader told by leader epochs, starts
    #: told a cut), else None
    hand: tuple[int, int, int, int, int, int, int] | None = None
    #: with the mirror schedule: (mirror writes, starts answered with a committed offset)
    mirror: tuple[int, int] | None = None
    #: with ``--give-backs`` (AMO): (ends of batches given back, closes after one, earlier
    #: batches' ends refused)
    gave: tuple[int, int, int] | None = None


class Sim:
    """One seeded run. Everything random comes from ``self.rng``; ties in time are broken by
    insertion order, so a seed replays exactly.

    Two opt-in economies for large fault-free fleets (``bench/fleet.py``); the seeded runs
    leave them off and are unchanged by them (docs/simulation.md, "A refactor leaves every
    schedule as it was"):

    - ``shared_replay``: the instances of equal replay lag share one replay (one world per
      coordination partition, applied once) instead of each folding every record; each still
      hears ``Replayed`` on its own schedule. A replay is a pure fold, so a shared world is
      the world each would have built; it may be ahead of the instance's last ``Replayed``
      by what another instance's replay applied since. No freezes: a frozen or stale
      replay cannot be shared.
    - ``indexed_checks``: the at-most-one-holder check looks only at instances whose core
      holds the partition (``may_hand_out`` implies holding it) instead of every instance.
    """

    shared_replay = False
    indexed_checks = False
    #: a share of the seeds upgrade the group (:mod:`scenarios.sim_upgrade`); a scripted
    #: stage's script supplies its members, so it has none
    upgrades = True

    def __init__(
        self,
        seed: int,
        *,
        fix: bool = True,
        trace: bool = False,
        rebalance: str | None = None,
        units: str | None = None,
        without: frozenset[str] = frozenset(),
        protocol_version: int | None = None,
        stale_answers: bool = False,
        seeks: bool | str = False,
        mirror: bool = False,
        epochs: bool = False,
        give_backs: bool = False,
    ) -> None:
        rng = self.rng = random.Random(seed)
        #: the stale-answer schedule (module docstring), off unless asked: its own generator
        self.stale_answers = stale_answers
        self.srng = random.Random(f"stale-answers/{seed}")
        #: every member's cap (``CoreOptions.protocol_version``; None: the newest, or the
        #: upgrade schedule's): the experiments of properties older than version 7 keep the
        #: schedules of members that heartbeat per partition
        self.protocol_version = protocol_version
        #: the unkind faults' own generator (module docstring)
        xrng = self.xrng = random.Random(f"unkind/{seed}")
        self.seed = seed
        unknown = set(without) - FIXES
        if unknown:
            raise ValueError(f"no such fix: {sorted(unknown)} (choose from {sorted(FIXES)})")
        #: ``fix=False`` (``--without-restart-fix``) is the restart-bug experiment: since protocol
        #: version 4 each of property a, property c and the core's restart after a surprising
        #: verdict alone stops that bug, so they go too (the lead's choice on main)
        self.without = frozenset(without) | (frozenset() if fix else RESTART_BUG_EXPERIMENT)
        self.fix = "restart-fix" not in self.without
        #: what every world and every core is built without
        self.rules_off = self.without & WORLD_FIXES
        self.core_off = self.without & CORE_FIXES
        #: the rule table of every replay (the production one unless rules are off)
        self.rules = rules_without(self.rules_off)
        #: transport (i), per (instance, cp) FIFO behind a late write; else (ii)
        self.fifo = "idempotent-writes" not in self.without
        #: replays notice a log that went back (``--without rewind-check``: they do not)
        self.check_rewind = "rewind-check" not in self.without
        #: a write that lands below the offset its sender's replay had reached when it was
        #: sent shows the log went back (``--without landed-below``: only what the log holds
        #: there now is compared, and our own record there passes)
        self.check_landed_below = "landed-below" not in self.without
        #: members announce their replay configuration; a cold start that finds the log's
        #: prefix gone without a snapshot of its own halts (:mod:`scenarios.sim_bounded`)
        self.announce = "announce" not in self.without
        self.refuse_gaps = "gap-refusal" not in self.without
        #: a cold start restores only a snapshot of its own rules (rule 1; without it, any)
        self.snapshot_rules = "snapshot-rules" not in self.without
        self.group = GROUP
        self.topic = TOPIC
        #: the bounded-log schedule (None: this seed has none)
        self.bounded: Bounded | None = None
        #: the upgrade schedule (:mod:`scenarios.sim_upgrade`; None: this seed has none)
        self.upgrade: Upgrade | None = None
        #: (instance, cp) -> when the last write in its FIFO lands (transport i)
        self._held_until: dict[tuple[tuple[str, str], int], int] = {}
        self.tracing = trace
        self.trace: list[str] = []
        self.mode = rng.choice(("alo", "amo"))
        self.partitions = rng.randint(1, 4)
        self.ncoord = rng.randint(1, 3)
        self.fault_ms = rng.randint(10, 30) * HB
        #: the group must have settled by then (ALO: handed out everything produced)
        self.end_ms = self.fault_ms + 100 * HB
        self.now = 0
        self.steps = 0
        self._seq = 0
        #: writes sent so far: each member write's number, in the order sent (the checks
        #: tell a record that landed after a later write of its writer's, to that partition)
        self._sent = 0
        #: AMO: the highest offset each instance reserved each partition through, and what
        #: the step being carried handed out (before user code gave any of it back)
        self._reserved: dict[tuple[tuple[str, str], Key], int] = {}
        self._step_handed: dict[Key, int] = {}
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self.log: list[list[tuple[int, bytes, bytes]]] = [[] for _ in range(self.ncoord)]
        self.oracle = [self.world() for _ in range(self.ncoord)]
        #: what the members claim: partitions of TOPIC, or tasks (ALO only; drawn from a
        #: generator of its own, so the partition seeds replay as before tasks existed)
        if units is None:
            units = "partitions"
            if self.mode == "alo" and random.Random(f"tasks-{seed}").random() < 0.5:
                units = "tasks"
        if units == "tasks":
            self.mode = "alo"
        self.sources = TASK_SOURCES if units == "tasks" else (TOPIC,)
        self.produced = {(s, p): 0 for s in self.sources for p in range(self.partitions)}
        self.instances: list[_Instance] = []
        #: lag -> the replay the instances of that lag share (``shared_replay``)
        self._replays: dict[int, _Replay] = {}
        #: partition -> instances whose core holds it (``indexed_checks``)
        self._holding: dict[Key, set[int]] = {}
        self._by_id: dict[int, _Instance] = {}
        self._clients = 0
        self._instances = 0
        margin = HB // 4
        self.checks = Checks(
            self.mode, 2 * HB - margin, {s: TOPIC for s in self.sources if s != TOPIC}
        )
        self.faults = rng.random() < 0.9
        self.p_drop = rng.choice((0.0, 0.02, 0.1)) if self.faults else 0.0
        self.p_dup = rng.choice((0.0, 0.02, 0.1)) if self.faults else 0.0
        self.p_fail = rng.choice((0.0, 0.02, 0.1)) if self.faults else 0.0
        self.p_lost_answer = rng.choice((0.0, 0.02, 0.1)) if self.faults else 0.0
        self.max_delay = rng.choice((2, 10, 40))
        #: the group's strategy (docs/rebalancing.md); "balanced" runs also check the target
        #: is reached after the faults and that nothing moves in the steady state after it
        self.rebalance = rebalance or rng.choice(("balanced", "balanced", "none"))
        self.balanced_ms = self.fault_ms + BALANCED_AFTER * HB
        self._steady: dict[Key, str | None] | None = None
        # the unkind faults (module docstring), from their own generator
        self.p_late = xrng.choice((0.3, 0.7)) if self.p_drop else 0.0
        self.p_stale_thaw = 0.8
        amo = self.mode == "amo"
        self.zombie_at = (
            xrng.randint(HB, max(HB, self.fault_ms - 9 * HB))
            if self.faults and xrng.random() < (0.7 if amo else 0.25)
            else None
        )
        self.reset_at = (
            xrng.randint(2 * HB, self.fault_ms)
            if self.faults and self.sources == (TOPIC,) and xrng.random() < 0.3
            else None
        )
        #: the log that goes back (module docstring), from a generator of its own so the
        #: seeds it leaves alone keep their schedules
        rrng = self.rrng = random.Random(f"rewind/{seed}")
        self.rewind_at = (
            rrng.randint(2 * HB, self.fault_ms - HB)
            if self.faults
            and self.sources == (TOPIC,)
            and not self.shared_replay
            and rrng.random() < 0.2
            else None
        )
        #: the bounded-log schedule (:mod:`scenarios.sim_bounded`), a generator of its own
        brng = random.Random(f"bounded/{seed}")
        eligible = (
            self.faults
            and self.sources == (TOPIC,)
            and not self.shared_replay
            and self.rewind_at is None
        )
        bounded = eligible and brng.random() < 0.4
        if eligible and not bounded and self.upgrades:  # the upgrade schedule brings one
            self.upgrade = Upgrade.drawn(self, seed, HB)
        if self.upgrade is not None and "ordered-upgrades" not in self.without:
            # an upgrade through caps below 7 needs an ordered transport (PROTOCOL.md,
            # "What a cap below 7 leaves open"): the overtaking one only without this too
            self.fifo = True
        if bounded or self.upgrade is not None:
            self.bounded = Bounded(self, brng, HB)
            self.oracle = [self.world() for _ in range(self.ncoord)]  # with g's keys
        #: ``--give-backs`` (module docstring), AMO seeds only: its own generator; (given
        #: back, closes after one, earlier batches' ends refused)
        self.give_backs = give_backs and self.mode == "amo"
        self.grng = random.Random(f"give-back/{seed}")
        self.gave = [0, 0, 0]
        #: (instance, partition) -> the records and the number of the last batch handed out
        self._batches: dict[
            tuple[tuple[str, str], Key], tuple[tuple[tuple[int, bytes], ...], int]
        ] = {}
        #: the user-hand schedule (:mod:`scenarios.sim_seeks`; ``--seeks``, else None)
        self.hand = (
            UserHand.drawn(self, seed, HB, deep=seeks == "deep", epochs=epochs) if seeks else None
        )
        #: the mirror schedule (:mod:`scenarios.sim_mirror`): Kafka's committed offsets that
        #: start a partition with no position (not with the user hand, which answers look-ups)
        tasks = {} if self.sources == (TOPIC,) else {TOPIC: self.sources}
        self.mirror = (
            Mirror.drawn(seed, HB, tasks, sorted(self.produced))
            if mirror and self.hand is None
            else None
        )
        for key, consumed in ({} if self.mirror is None else self.mirror.offsets).items():
            self.checks.truncated(key, consumed)  # (consumed as a Kafka group, before)

    def world(self) -> WorldState:
        """A replayer's world, with the fixes the run removes (every world the same) and, in
        the bounded-log schedule, the checked group's admin key if it has one."""
        keys = self.bounded.g_keys if self.bounded is not None else None
        return WorldState(admin_keys=keys, rules=self.rules)

    # -- scheduling --------------------------------------------------------------------------

    def at(self, t: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (t, self._seq, fn))

    def note(self, text: str) -> None:
        if self.tracing:
            self.trace.append(f"{self.now:>7} {text}")

    def in_faults(self) -> bool:
        return self.now < self.fault_ms

    def run(self) -> Result:
        for _ in range(self.rng.randint(1, 4)):
            self.join()
        self.at(0, self.produce)
        if self.faults:
            self.at(self.rng.randint(1, 4) * HB, self.fault)
        if self.zombie_at is not None:
            self.at(self.zombie_at, self.zombie)
        if self.reset_at is not None:
            self.at(self.reset_at, self.admin_reset)
        if self.rewind_at is not None:
            self.at(self.rewind_at, self.rewind)
        if self.bounded is not None:
            self.at(0, self.bounded.start_u)
            if self.bounded.outage_at is not None:
                self.at(self.bounded.outage_at, self.bounded.outage)
        if self.upgrade is not None:
            self.upgrade.start()
        if self.hand is not None:
            self.hand.begin()
        self.at(self.fault_ms, self.settle)
        self.at(self.fault_ms + 2 * HB, self.settled)
        if self.rebalance != "none":
            self.at(self.balanced_ms, self.check_balanced)
            self.at(self.balanced_ms + STEADY * HB, self.check_steady)
        while self._queue and not self.checks.stop:
            t, _, fn = heapq.heappop(self._queue)
            if t > self.end_ms:
                break
            self.now = t
            self.steps += 1
            fn()
        if not self.checks.violations:
            self.now = self.end_ms
            self.checks.complete(self.now, self.produced)
        return Result(
            self.seed,
            self.mode + ("+tasks" if self.sources != (TOPIC,) else ""),
            tuple(self.checks.violations),
            self.now,
            self.steps,
            tuple(self.trace),
            None if self.bounded is None else (self.bounded.truncations, self.bounded.gaps),
            None if self.upgrade is None else self.upgrade.summary(),
            (self.checks.takeover_rewinds, self.checks.unnamed_rewinds),
            None if self.hand is None else self.hand.summary(),
            None if self.mirror is None else (self.mirror.writes, self.mirror.answered),
            (self.gave[0], self.gave[1], self.gave[2]) if self.give_backs else None,
        )

    # -- members -----------------------------------------------------------------------------

    def join(self, client_id: str | None = None, **core_options: object) -> _Instance:
        """A new member instance (of a new client unless ``client_id`` is given); the
        scripted stage (:mod:`scenarios.stages.sim_stage`) passes more ``CoreOptions``."""
        if client_id is None:
            self._clients += 1
            client_id = f"c{self._clients}"
        self._instances += 1
        shared = None
        if self.shared_replay:
            lag = self.rng.choice((0, 5, 20, 60))
            shared = self._replays.get(lag)
            if shared is None:
                shared = self._replays[lag] = _Replay(
                    [self.world() for _ in range(self.ncoord)], [-1] * self.ncoord
                )
            worlds = shared.worlds
        else:
            worlds = [self.world() for _ in range(self.ncoord)]
        batch = core_options.pop("batch_size", self.rng.choice((1, 5, 20)))
        if self.hand is not None:
            core_options.setdefault("auto_offset_reset", self.hand.reset)
            prefetch = self.hand.prefetch(batch)
            if prefetch is not None:
                core_options.setdefault("prefetch", prefetch)
        if self.upgrade is not None:
            cap = self.upgrade.cap_for(client_id)
            if self.protocol_version is not None:
                cap = min(cap, self.protocol_version)
            core_options.setdefault("protocol_version", cap)
        elif self.protocol_version is not None:
            core_options.setdefault("protocol_version", self.protocol_version)
        options = CoreOptions(
            group_id=GROUP,
            client_id=client_id,
            instance_id=f"i{self._instances}",
            topics=((TOPIC, self.partitions),),
            coordination_partitions=self.ncoord,
            mode=self.mode,
            heartbeat_interval_ms=core_options.pop("heartbeat_interval_ms", HB),
            batch_size=batch,
            # pinned: the seeds' traces were recorded fetching one batch ahead (the deep
            # user-hand schedule reads ahead as a Consumer does: sim_seeks.UserHand.prefetch)
            prefetch=core_options.pop("prefetch", batch),
            claim_interval_ms=core_options.pop("claim_interval_ms", HB // 2),
            rebalance=core_options.pop("rebalance", self.rebalance),
            tasks=((TOPIC, self.sources),) if self.sources != (TOPIC,) else (),
            **core_options,  # type: ignore[arg-type]
        )
        core = MemberCore(
            options,
            worlds,
            shared_targets=None if shared is None else shared.targets,
            _reread_after_takeover=self.fix,
            _without=self.core_off,
        )
        inst = _Instance(client_id, options.instance_id, core, worlds)
        inst.applied = [-1] * self.ncoord
        inst.last_seen = [None] * self.ncoord
        inst.own = [{} for _ in range(self.ncoord)]
        if shared is not None:
            inst.lag, inst.shared = lag, shared
        else:
            inst.lag = self.rng.choice((0, 5, 20, 60))
        self.instances.append(inst)
        self.note(f"start {inst.me}")
        if self.bounded is not None:
            self.bounded.joined(inst)
        self.at(self.now, lambda: self.replay(inst))
        self.at(self.now + 1, lambda: self.tick(inst))
        return inst

    def live(self) -> list[_Instance]:
        return [i for i in self.instances if i.state != "dead" and not i.core.closed]

    def on(self, inst: _Instance, fn: Callable[[], None]) -> None:
        """Run ``fn`` in ``inst``'s process: dropped if it is dead, postponed if frozen."""
        if inst.state == "dead":
            return
        if inst.state == "frozen":
            inst.postponed.append(fn)
            return
        fn()

    def _step_held(self, inst: _Instance, answers: list[Replayed]) -> None:
        """Step the catch-up answers ``inst`` froze holding (the stale-answer schedule)."""
        armed = inst.held_answers > 0  # (not if it thawed before a stall its core finds)
        if armed:
            inst.held_answers = 2
        for answer in answers:
            self.step(inst, answer)
        if armed:
            inst.held_answers = min(inst.held_answers, 1)

    def step(self, inst: _Instance, event: object) -> None:
        if inst.state != "alive" or inst.core.closed:
            return
        closing = (  # (a graceful close's mirror commits its final positions)
            self.hand.closing(inst)
            if self.hand is not None and type(event) is Close and event.release
            else None
        )
        actions = inst.core.step(self.now, event)  # type: ignore[arg-type]
        inst.last_step_at = self.now
        if inst.held_answers:
            self._check_held(inst, event, actions)
        self._step_handed.clear()
        for action in actions:
            self.carry(inst, action)
        if self.mirror is not None:
            self.mirror.after_step(self, inst)
        elif self.hand is not None:
            self.hand.mirrored(inst, closing)
        if self.indexed_checks:
            self._index_held(inst)
        self.check_holders(inst)
        if type(event) is Replayed:
            self.check_lost(inst, event.cp)

    def _check_held(self, inst: _Instance, event: object, actions: list) -> None:
        """The check of the core's "fresh-ends" itself: after a stall, an instance that woke
        holding catch-up answers from before it writes nothing until another answer at the
        end (the one its ``CatchUp`` gets, or its replay's) was stepped. Not counted: its
        leave (a close says nothing it remembers)."""
        fresh = type(event) is Replayed and event.at_end and inst.held_answers == 1
        if fresh:
            inst.held_answers = 0
        elif any(isinstance(a, Write) and a.kind != "leave" for a in actions):
            inst.held_answers = 0  # (once)
            self.checks.fail_and_go_on(
                self.now, f"{inst.me} wrote after a stall before its replay caught up with it"
            )

    def check_lost(self, inst: _Instance, cp: int) -> None:
        """After ``inst``'s replay of ``cp`` moved, its core holds nothing there that the
        replay gives another holder (or none): what it lost is revoked in that very step,
        not at a later heartbeat's verdict (``on_lost`` is the user's signal to stop)."""
        if inst.state != "alive" or inst.core.closed or cp in inst.halted or cp in inst.gapped:
            return
        if inst.shared is not None:
            return  # (a shared world may be ahead of what this instance was told)
        world = inst.worlds[cp]
        for topic, p in inst.core.held():
            if coordination_partition(topic, p, self.ncoord) != cp:
                continue
            holder = world.holder(GROUP, topic, p)
            if holder != inst.me:
                self.checks.fail(
                    self.now,
                    f"{inst.me} still holds {topic}/{p} after its replay of cp{cp} showed "
                    f"holder {holder}",
                )

    def _index_held(self, inst: _Instance) -> None:
        """Keep ``_holding`` current for ``inst`` (only its own steps change what it holds)."""
        held = set(inst.core.held())
        was = inst.indexed
        if held == was:
            return
        n = id(inst)
        for key in was - held:
            self._holding[key].discard(n)
        for key in held - was:
            self._holding.setdefault(key, set()).add(n)
            self._by_id[n] = inst
        inst.indexed = held

    def tick(self, inst: _Instance) -> None:
        def run() -> None:
            self.step(inst, Tick())
            for _ in inst.core.uncommitted():  # user code polls: one partition's batch each time
                self.step(inst, Poll(self.rng.choice((1, 10, 100))))
            if inst.state != "dead" and not inst.core.closed:
                self.at(self.now + self.rng.randint(HB // 10, HB // 4), lambda: self.tick(inst))

        self.on(inst, run)

    def replay(self, inst: _Instance) -> None:
        def run() -> None:
            for cp in range(self.ncoord):
                if self._apply_visible(inst, cp):
                    self.step(inst, Replayed(cp, inst.applied[cp], at_end=True))
            if self.bounded is not None and inst.state == "alive" and not inst.core.closed:
                self.bounded.housekeeping(inst)
            if inst.state != "dead" and not inst.core.closed:
                self.at(self.now + self.rng.randint(3, 30), lambda: self.replay(inst))

        self.on(inst, run)

    def _apply_visible(self, inst: _Instance, cp: int) -> bool:
        """Apply what ``inst``'s replay of ``cp`` can see now (it trails the log by its lag,
        and a stale wake sees nothing past its horizon); True if it moved, or looked first."""
        if inst.shared is not None:
            return self._apply_shared(inst, cp)
        if cp in inst.halted:
            return False  # stopped for good: the log went back under it
        inst.unaware.discard(cp)
        records = self.log[cp]
        applied = inst.applied[cp]
        if (
            self.check_rewind
            and applied >= 0
            and (applied >= len(records) or records[applied] is not inst.last_seen[cp])
        ):
            self.went_back(inst, cp)
            return False
        own = inst.own[cp]
        if own:
            for off in [o for o in own if o < len(records)]:
                if records[off][1:] != own.pop(off):
                    self.went_back(inst, cp)  # our write's offset holds another record
                    return False
        if self.bounded is not None:
            self.bounded.reachable(inst, cp)  # a cold start, or a replay below the log start
            applied = inst.applied[cp]
        start = applied + 1
        end = len(records)
        visible = self.now - inst.lag
        if inst.horizon is not None:
            if self.now < inst.stale_until:
                visible = min(visible, inst.horizon)
            else:
                inst.horizon = None
        while end > start and records[end - 1][0] > visible:
            end -= 1  # not visible to this instance's replay yet
        halted_gap = cp in inst.gapped and self.bounded is not None
        restored = self.bounded is not None and (inst.me, cp) in self.bounded.restored
        for off in range(start, end):
            ts, key, value = records[off]
            v = inst.worlds[cp].apply(off, ts, key, value)
            if halted_gap:
                # record by record: Regained reads the pause from the world after the chunk
                # it is given, so a chunk that runs past the pause's end would lose it (a
                # known gap of core.rewind, tests/scenarios/test_bounded.py)
                assert self.bounded is not None
                self.bounded.applied(inst, cp, [off], [key], [v])
            elif restored:  # it started from a snapshot: it must judge as the log's replay
                assert self.bounded is not None
                self.bounded.agree(inst, cp, off, v)
        inst.applied[cp] = end - 1
        if end > start:
            inst.last_seen[cp] = records[end - 1]
        return start < end or start == 0

    def own_landed(self, inst: _Instance, action: Write, offset: int, sent_at: int) -> None:
        """The edge heard where a write landed: remember it until the replay reaches it
        (or, if the replay is past it already, look at the log there now). ``sent_at``: the
        last offset the replay had applied when the write was sent; landing at or below it,
        the write took an offset whose record the replay applied (the log went back)."""
        cp = action.cp
        if cp in inst.halted or inst.shared is not None:
            return
        if self.check_landed_below and offset <= sent_at:
            self.went_back(inst, cp)
            return
        if inst.applied[cp] < offset:
            inst.own[cp][offset] = (action.key, action.value)
            return
        records = self.log[cp]
        if offset >= len(records) or records[offset][1:] != (action.key, action.value):
            self.went_back(inst, cp)

    def went_back(self, inst: _Instance, cp: int) -> None:
        """``inst``'s replay of ``cp`` applied a record the log no longer holds: it halts
        there (``Halted``: the core drops what it holds there and acts on nothing of it),
        and an operator restarts the instance a little later (docs/bounded-log.md)."""
        applied = inst.applied[cp]
        end = len(self.log[cp])
        inst.halted.add(cp)
        self.note(f"{inst.me} sees cp{cp} WENT BACK (applied {applied}, log ends at {end})")
        self.step(inst, Halted(cp, applied + 1, min(end, applied + 1), "rewound"))
        cid = inst.client_id

        def restart() -> None:
            if inst.state == "dead" or inst.core.closed:
                return
            self.note(f"OPERATOR restarts {inst.me} (halted)")
            inst.state = "dead"
            self.join(cid)

        self.at(self.now + self.rrng.randint(2 * HB, 6 * HB), restart)

    def _apply_shared(self, inst: _Instance, cp: int) -> bool:
        """:meth:`_apply_visible` over a shared replay: bring it to what this lag sees now
        (once for all who share it), then tell the instance how far it is."""
        shared = inst.shared
        assert shared is not None
        records = self.log[cp]
        start = shared.applied[cp] + 1
        visible = self.now - inst.lag
        # append times never decrease (the simulated clock): the first record this lag cannot
        # see yet is found by bisection, not by walking back from the log end
        end = bisect_right(records, visible, lo=start, key=_append_time)
        if end > start:
            shared.worlds[cp].apply_many((off, *records[off]) for off in range(start, end))
            shared.applied[cp] = end - 1
        seen = inst.applied[cp]
        inst.applied[cp] = shared.applied[cp]
        return seen < shared.applied[cp] or seen == -1

    def catch_up(self, inst: _Instance) -> None:
        """The edge's answer to CatchUp: replay to the log end this instance can see now,
        then say so for every coordination partition (also where nothing was new)."""

        def run() -> None:
            if inst.horizon is not None and self.now < inst.stale_until:
                # woken stale: its replay cannot reach the end yet, so the answer waits
                self.at(inst.stale_until, lambda: self.catch_up(inst))
                return
            if self.stale_answers and self.in_faults() and self.srng.random() < 0.5:
                # the process stops between reaching the ends and stepping its answers
                answers = []
                for cp in range(self.ncoord):
                    self._apply_visible(inst, cp)
                    answers.append(Replayed(cp, inst.applied[cp], at_end=True, ends_at=self.now))
                self.note(f"{inst.me} stops holding a catch-up answer")
                self.freeze(inst)
                inst.held_answers = 1
                inst.postponed.append(lambda: self._step_held(inst, answers))
                fence = inst.core.options.fence_after_ms  # a stall its core will find
                self.at(
                    self.now + self.srng.randint(fence + 1, fence + 3 * HB), lambda: self.thaw(inst)
                )
                return
            for cp in range(self.ncoord):
                self._apply_visible(inst, cp)
                self.step(inst, Replayed(cp, inst.applied[cp], at_end=True, ends_at=self.now))

        self.on(inst, run)

    # -- the edge: carrying actions out -------------------------------------------------------

    def carry(self, inst: _Instance, action: object) -> None:
        rng = self.rng
        if isinstance(action, Write):
            msg = decode(action.key, action.value)
            self.note(f"{inst.me} sends {action.kind} {_short(msg)} -> cp{action.cp}")
            if isinstance(msg, ClaimingMessages):
                self._check_window(inst, msg)
            self._sent += 1
            sent = self.checks.sends = self._sent
            timeout = 2 * self.max_delay + HB
            fifo = (inst.me, action.cp)
            if self.in_faults() and rng.random() < self.p_drop:
                self.note(f"  write {action.token} of {inst.me} dropped")
                self.at(
                    self.now + timeout,
                    lambda: self.on(inst, lambda: self.step(inst, WriteFailed(action.token))),
                )
                if self.xrng.random() < self.p_late:
                    late = self.now + timeout + self.xrng.randint(1, 3 * HB)
                    if self.fifo:
                        late = max(late, self._held_until.get(fifo, late))
                        self._held_until[fifo] = late
                    self.note(f"  ... it will land late, at {late}")
                    self.at(late, lambda: self.land_late(action, sent))
                return
            sent_at = inst.applied[action.cp]
            land = self.now + rng.randint(0, self.max_delay)
            if self.fifo:  # never before an earlier write (inserted after it: ties keep order)
                land = max(land, self._held_until.get(fifo, land))
                self._held_until[fifo] = land

            def landed() -> None:
                offset = self.append(action.cp, action.key, action.value, sent)
                if self.in_faults() and rng.random() < self.p_dup:
                    self.append(action.cp, action.key, action.value, sent)
                if self.in_faults() and rng.random() < self.p_fail:
                    answer: object = WriteFailed(action.token)
                    when = self.now + rng.randint(0, self.max_delay)
                elif self.in_faults() and rng.random() < self.p_lost_answer:
                    answer = WriteFailed(action.token)
                    when = max(self.now, land) + timeout
                else:
                    answer = Written(action.token, offset)
                    when = self.now + rng.randint(0, self.max_delay)

                def answered() -> None:
                    if isinstance(answer, Written) and self.check_rewind:
                        self.own_landed(inst, action, offset, sent_at)
                    self.step(inst, answer)

                self.at(when, lambda: self.on(inst, answered))

            self.at(land, landed)
        elif isinstance(action, Fetch):
            if self.hand is not None and self.hand.refuses(inst, action):
                return
            self.at(
                self.now + rng.randint(0, self.max_delay), lambda: self.fetch(inst, action, False)
            )
        elif isinstance(action, LookUp) and self.mirror is not None:  # (never with a hand)
            mirror, key = self.mirror, (action.topic, action.partition)

            def read() -> None:  # (Kafka's committed offset as it is when the read lands)
                committed = mirror.committed(key) if action.unpositioned else None
                found = Bounds(action.token, *key, 0, self.produced[key], committed)
                self.step(inst, found)

            when = mirror.answer_at(self.now + rng.randint(0, self.max_delay))
            self.at(when, lambda: self.on(inst, read))
        elif isinstance(action, LookUp):
            key = (action.topic, action.partition)
            bounds = (
                Bounds(action.token, action.topic, action.partition, 0, self.produced[key])
                if self.hand is None
                else self.hand.bounds(action, inst)
            )
            self.at(
                self.now + rng.randint(0, self.max_delay),
                lambda: self.on(inst, lambda: self.step(inst, bounds)),
            )
        elif isinstance(action, HandOut):
            key = (action.topic, action.partition)
            records = action.records
            kept = len(records)
            if (
                self.give_backs
                and kept > 1
                and self.in_faults()
                and self.grng.random() < GIVE_BACK_SHARE
            ):
                kept = self.grng.randint(1, kept - 1)  # user code saw these, then failed
            offsets = [o for o, _ in records[:kept]]
            self._step_handed[key] = records[-1][0]
            self.note(f"{inst.me} HANDS OUT {key} {offsets[0]}..{offsets[-1]}")
            self.checks.handed_out(self.now, inst.me, key, offsets)
            if self.hand is not None:
                self.hand.handed(inst, key, offsets)
            inst.core.commit(action.topic, action.partition, offsets)  # ALO: handled at once
            if self.give_backs:
                self.give_back(inst, key, tuple(records), action.handout, kept)
        elif isinstance(action, Revoke):
            self.note(
                f"{inst.me} revokes {action.topic}/{action.partition} lost={action.lost}: {action.why}"
            )
        elif isinstance(action, CatchUp):
            self.note(f"{inst.me} asks to catch up")
            self.at(self.now + rng.randint(0, self.max_delay), lambda: self.catch_up(inst))
        elif isinstance(action, Closed):
            self.note(f"{inst.me} closed")
        elif isinstance(action, NoStart) and self.hand is not None:
            self.hand.no_start(inst, action)  # user code seeks (auto_offset_reset="error")

    def _check_window(self, inst: _Instance, msg: ClaimingMessages) -> None:
        """AMO's loss bound: a new reservation leaves at most ``max_reserved`` records
        reserved and not handed out (the simulated log's offsets have no gaps); one written
        again after a failure reserves through an offset it reserved before."""
        key = (msg.topic, msg.partition)
        last = msg.proposed_last_offset
        if last <= self._reserved.get((inst.me, key), -1):
            return
        self._reserved[(inst.me, key)] = last
        handed = inst.core.handed_through(*key)
        if handed is not None and key in self._step_handed:
            # the reservation was chosen in this step, before user code gave records of its
            # hand-out back (``give_back``, at once): they count as handed out here, and a
            # crash after a give-back loses them beside the window (docs/simulation.md)
            handed = max(handed, self._step_handed[key])
        window = inst.core.options.max_reserved
        if handed is not None and last - handed > window:
            self.checks.fail(
                self.now,
                f"{inst.me} reserves {key} through {last} with {handed} handed out: more "
                f"than max_reserved ({window}) at stake",
            )

    def give_back(
        self,
        inst: _Instance,
        key: Key,
        records: tuple[tuple[int, bytes], ...],
        handout: int,
        kept: int,
    ) -> None:
        """``--give-backs``: the records of hand-out ``handout`` past ``kept`` go back (they
        never reached user code); sometimes the member then closes (``Consumer.run`` after
        HandlerFailed), and sometimes user code tries to give back the end of the batch
        before (refused: it reached user code). A Consumer gives back at its next poll or
        close (``Consumer._take_back``): here at once, or up to HB later."""
        rng = self.grng
        earlier = self._batches.get((inst.me, key))
        self._batches[(inst.me, key)] = (records, handout)
        if kept < len(records):
            rest = records[kept:]
            self.note(f"{inst.me} GIVES BACK {key} {rest[0][0]}..{rest[-1][0]} of #{handout}")
            self.gave[0] += 1
            if rng.random() < 0.5:  # run() closes: its close takes them back first
                self.gave[1] += 1
                self._give_back(inst, key, rest, handout)
                self.at(self.now, lambda: self.on(inst, lambda: self.step(inst, Close())))
                cid = inst.client_id  # and the process starts again (a supervisor)
                self.at(self.now + rng.randint(HB // 2, 2 * HB), lambda: self._restarted(cid))
            elif rng.random() < 0.5:
                self._give_back(inst, key, rest, handout)
            else:  # at its next poll: handed out again only if nothing moved meanwhile
                later = self.now + rng.randint(1, HB)
                back = functools.partial(self._give_back, inst, key, rest, handout)
                self.at(later, lambda: self.on(inst, back))
            return
        if earlier is not None and rng.random() < 0.1:
            stale = earlier[0][rng.randrange(len(earlier[0])) :]
            try:
                inst.core.give_back(*key, stale, earlier[1])
            except ValueError:
                self.gave[2] += 1
                return
            self.note(f"{inst.me} GAVE BACK an earlier batch's {stale[0][0]}..{stale[-1][0]}")
            if "give-back-guard" not in self.without:
                self.checks.fail(self.now, f"{inst.me}: the end of an earlier batch was taken back")

    def _give_back(
        self, inst: _Instance, key: Key, rest: tuple[tuple[int, bytes], ...], handout: int
    ) -> None:
        """The core takes ``rest`` back, or refuses it (lost, as at a crash)."""
        if inst.state == "dead" or inst.core.closing:
            return  # (a Consumer takes back at its close's start: see Close above)
        try:
            inst.core.give_back(*key, rest, handout)
        except ValueError as exc:
            self.note(f"{inst.me} gives back nothing: {exc}")

    def _restarted(self, client_id: str) -> None:
        if self.in_faults():
            self.join(client_id)

    def fetch(self, inst: _Instance, action: Fetch, waited: bool) -> None:
        key = (action.topic, action.partition)
        n = self.produced[key]
        if action.offset >= n and not waited:
            self.at(self.now + HB // 2, lambda: self.fetch(inst, action, True))
            return
        records = tuple((o, b"") for o in range(action.offset, min(n, action.offset + 100)))

        def answer() -> None:
            if self.hand is not None:
                self.hand.fetched(inst, key, [o for o, _ in records])
            self.step(inst, Fetched(action.token, action.topic, action.partition, records, n))

        self.on(inst, answer)

    def land_late(self, action: Write, sent: int) -> None:
        """A write whose failure was reported lands after all (nobody hears of it)."""
        self.note("  LATE write lands:")
        self.append(action.cp, action.key, action.value, sent)

    def append(self, cp: int, key: bytes, value: bytes, sent: int | None = None) -> int:
        """Append a record to ``cp`` (``sent``: a member's write, its number in send order;
        None: the admin's)."""
        offset = len(self.log[cp])
        self.log[cp].append((self.now, key, value))
        world = self.oracle[cp]
        verdict = world.apply(offset, self.now, key, value)
        msg = decode(key, value)
        self.note(f"  cp{cp}@{offset} {_short(msg)}: {_verdict(verdict)}")
        self.checks.landed(world, msg, verdict, self.now, sent=None if sent is None else (cp, sent))
        return offset

    def check_holders(self, inst: _Instance) -> None:
        """Only a step can let a core hand out (time passing only takes that away), so after
        ``inst``'s step compare its partitions with every other live instance's."""
        for topic, p in inst.core.held():
            if not inst.core.may_hand_out(topic, p, self.now):
                continue
            among = (
                [self._by_id[n] for n in self._holding.get((topic, p), ())]
                if self.indexed_checks
                else self.instances
            )
            cp = coordination_partition(topic, p, self.ncoord)
            clients = {
                i.client_id
                for i in among
                if i.state == "alive"
                and cp not in i.unaware
                and i.core.may_hand_out(topic, p, self.now)
            }
            self.checks.holders(self.now, (topic, p), clients)

    # -- load and faults ---------------------------------------------------------------------

    def produce(self) -> None:
        if not self.in_faults():
            return
        p = self.rng.randrange(self.partitions)
        source = self.sources[0] if len(self.sources) == 1 else self.rng.choice(self.sources)
        self.produced[(source, p)] += self.rng.randint(1, 5)
        self.at(self.now + self.rng.randint(1, 20), self.produce)

    def fault(self) -> None:
        if not self.in_faults():
            return
        rng = self.rng
        live = [i for i in self.live() if i.state == "alive"]
        kind = rng.choice(("kill", "freeze", "restart", "restart", "join", "leave"))
        if not live:
            kind = "join"
        victim = rng.choice(live) if live else None
        upgrade = self.upgrade
        takeover = victim is not None and upgrade is not None and upgrade.takeovers_only()
        if takeover:
            kind = "restart"  # (sim_upgrade: a group upgraded by killed instances)
        self.note(f"FAULT {kind} {victim.me if victim else ''}")
        if kind == "kill" and victim is not None:
            victim.state = "dead"
            if rng.random() < 0.7:
                cid = victim.client_id
                self.at(self.now + rng.randint(0, 3 * HB), lambda: self.join(cid))
        elif kind == "freeze" and victim is not None:
            self.freeze(victim)
            self.at(self.now + rng.randint(2 * HB + 1, 5 * HB), lambda: self.thaw(victim))
        elif kind == "restart" and victim is not None:
            self.join(victim.client_id)
            if takeover or rng.random() < 0.5:
                victim.state = "dead"
            else:  # the old process lingers a little before it dies
                self.at(self.now + rng.randint(0, 2 * HB), lambda: self.kill(victim))
        elif kind == "join":
            self.join()
        elif kind == "leave" and victim is not None:
            self.step(victim, Close())
        self.at(self.now + rng.randint(HB // 2, 4 * HB), self.fault)

    def kill(self, inst: _Instance) -> None:
        self.note(f"kill {inst.me}")
        inst.state = "dead"

    def freeze(self, inst: _Instance) -> None:
        self.note(f"freeze {inst.me}")
        inst.state = "frozen"
        inst.frozen_at = self.now

    def thaw(self, inst: _Instance) -> None:
        """Wake ``inst``: what it postponed runs in a seeded random order (a tick may come
        before any replay progress), and most often its replay wakes stale (module
        docstring)."""
        if inst.state != "frozen":
            return
        rng = self.xrng
        postponed, inst.postponed = inst.postponed, []
        rng.shuffle(postponed)
        stale = ""
        if inst.frozen_at is not None and rng.random() < self.p_stale_thaw:
            inst.horizon = inst.frozen_at
            inst.stale_until = self.now + rng.randint(HB // 2, 2 * HB)
            stale = f", replay stale until {inst.stale_until}"
        self.note(f"thaw {inst.me} ({len(postponed)} postponed{stale})")
        last = inst.last_step_at
        if inst.held_answers and (
            last is None or self.now - last <= inst.core.options.fence_after_ms
        ):
            inst.held_answers = 0  # thawed early (the faults stopped): no stall, they count
        inst.state = "alive"
        inst.frozen_at = None
        for fn in postponed:
            self.on(inst, fn)

    def during_faults(self, fn: Callable[[], object]) -> None:
        """Run a step of a fault schedule only while faults last (the group then settles)."""
        if self.in_faults():
            fn()

    def zombie(self) -> None:
        """The zombie schedule: two instances of one client overlap (module docstring)."""
        if not self.in_faults():
            return
        rng = self.xrng
        holding = {
            self.oracle[coordination_partition(TOPIC, p, self.ncoord)].holder(GROUP, TOPIC, p)
            for p in range(self.partitions)
        }
        candidates = [i for i in self.live() if i.state == "alive" and i.me in holding]
        if not candidates:
            self.at(self.now + HB, self.zombie)
            return
        old = rng.choice(candidates)
        self.note(f"ZOMBIE {old.me}")
        self.freeze(old)
        cid = old.client_id
        restart = rng.randint(2 * HB + 1, 4 * HB) if rng.random() < 0.75 else rng.randint(0, 2 * HB)
        self.at(self.now + restart, lambda: self.during_faults(lambda: self.join(cid)))
        third = self.join()
        leave = self.now + rng.randint(3 * HB, 6 * HB)
        self.at(leave, lambda: self.during_faults(lambda: self.step(third, Close())))
        thaw = self.now + rng.randint(5 * HB, 9 * HB)
        self.at(thaw, lambda: self.thaw(old))
        if rng.random() < 0.5:  # it is then stopped (SIGTERM) and a fourth client joins
            close = thaw + rng.randint(HB // 4, 2 * HB)
            self.at(close, lambda: self.during_faults(lambda: self.step(old, Close())))
            self.at(close + rng.randint(0, HB), lambda: self.during_faults(self.join))
        if rng.random() < 0.5 and thaw + 2 * HB < self.fault_ms:
            self.at(thaw + rng.randint(HB, 3 * HB), self.zombie)

    def rewind(self) -> None:
        """A coordination partition loses its last records, acknowledged and applied (an
        unclean leader election): new writes reuse their offsets (module docstring)."""
        if not self.in_faults():
            return
        rng = self.rrng
        candidates = [cp for cp in range(self.ncoord) if len(self.log[cp]) >= 2]
        if not candidates:
            self.at(self.now + HB, self.rewind)
            return
        cp = rng.choice(candidates)
        n = len(self.log[cp])
        cut = max(1, n - rng.randint(1, 100))
        del self.log[cp][cut:]
        world = self.oracle[cp] = self.world()
        world.apply_many((off, *record) for off, record in enumerate(self.log[cp]))
        keys = [
            (TOPIC, p)
            for p in range(self.partitions)
            if coordination_partition(TOPIC, p, self.ncoord) == cp
        ]
        self.note(f"REWIND cp{cp}: records {cut}..{n - 1} are lost ({keys})")
        for key in keys:
            pos = world.resume_offset(GROUP, *key)
            self.checks.went_back(self.now, key, -1 if pos is None else pos - 1)
        for inst in self.instances:
            if inst.applied[cp] >= cut or any(o >= cut for o in inst.own[cp]):
                # it cannot know before its replay's next step (a thawed one may act first)
                inst.unaware.add(cp)

    def admin_reset(self) -> None:
        """The reset race: an operator pauses the group and sets positions while members
        run, as ``logmarshal.admin.reset.execute`` does (module docstring)."""
        if not self.in_faults():
            return
        rng = self.xrng
        client, instance = ADMIN
        pause = rng.randint(2 * HB, 5 * HB)
        # the admin's clock: the pause is at least 2·HB after every record of it lands
        expiry = self.now + self.max_delay + pause
        pausing = self._signed(
            ReleaseGroup(
                client_id=client, instance_id=instance, group_id=GROUP, msg_expire_time=expiry
            )
        )
        landed = self.now
        for cp in range(self.ncoord):
            when = self.now + rng.randint(0, self.max_delay // 2)
            landed = max(landed, when)
            self.at(when, lambda cp=cp: self.append(cp, *encode(pausing)))
        plan = []
        for p in range(self.partitions):
            if rng.random() < 0.3:
                continue
            # planned before the pause landed: "current" is read now (the reset race of
            # docs/protocol-notes.md)
            world = self.oracle[coordination_partition(TOPIC, p, self.ncoord)]
            current = world.resume_offset(GROUP, TOPIC, p) or 0
            kind = rng.choice(("earliest", "current", "shift", "latest"))
            new = {
                "earliest": 0,
                "current": current,
                "shift": max(0, current - rng.randint(1, 40)),
                "latest": self.produced[(TOPIC, p)],
            }[kind]
            plan.append((p, kind, new))
        self.note(f"ADMIN RESET pause until {expiry}: {plan}")
        for p, _, new in plan:
            msg = self._signed(
                Heartbeat(
                    client_id=client,
                    instance_id=instance,
                    group_id=GROUP,
                    topic=TOPIC,
                    partition=p,
                    last_offset=new - 1,
                    heartbeat_interval_ms=HB,
                )
            )
            cp = coordination_partition(TOPIC, p, self.ncoord)
            when = landed + rng.randint(1, self.max_delay // 2 + 1)
            self.at(when, lambda cp=cp, msg=msg: self.append(cp, *encode(msg)))

    def _signed(self, msg: object) -> object:
        """An admin record, tagged with the group's key where it has one (bounded seeds)."""
        key = self.bounded.g_keys.get(GROUP) if self.bounded is not None else None
        return msg if key is None else sign(msg, key)  # type: ignore[arg-type]

    def settled(self) -> None:
        """Stop early once the group has handed out everything (checked every HB)."""
        handed = self.checks.handed
        positions = self.checks.positions
        if self.mode == "amo":  # AMO may lose reserved batches: settled once positions are
            done = all(positions.get(k, -1) >= n - 1 for k, n in self.produced.items())
        else:
            done = all(len(handed[k]) >= n for k, n in self.produced.items())
        if done and self.rebalance != "none" and self.now < self.balanced_ms + STEADY * HB:
            self.at(self.now + HB, self.settled)  # the steady-state check is still to come
        elif done:
            self.end_ms = self.now
        else:
            self.keep_a_consumer()
            self.at(self.now + HB, self.settled)

    def oracle_holders(self) -> dict[Key, str | None]:
        """Partition -> client_id holding it, per the simulated log."""
        out: dict[Key, str | None] = {}
        for p in range(self.partitions):
            key = (TOPIC, p)
            world = self.oracle[coordination_partition(TOPIC, p, self.ncoord)]
            holder = world.holder(GROUP, TOPIC, p)
            out[key] = None if holder is None else holder[0]
        return out

    def check_balanced(self) -> None:
        """BALANCED_AFTER·HB after the faults: every partition held by a running member,
        each running member holding floor(P/n) or ceil(P/n)."""
        members = {
            i.client_id
            for i in self.live()
            if i.state == "alive" and not i.core.fenced and not i.core.closing
        }
        holders = self.oracle_holders()
        counts = {c: sum(1 for h in holders.values() if h == c) for c in members}
        low, high = self.partitions // len(members), -(-self.partitions // len(members))
        stray = {k: h for k, h in holders.items() if h not in members}
        uneven = {c: n for c, n in counts.items() if not low <= n <= high}
        self.note(f"BALANCE CHECK {counts} {stray or ''}")
        if stray or uneven:
            self.checks.fail(
                self.now,
                f"not balanced {BALANCED_AFTER}·HB after the faults: {counts} "
                f"(each {low}..{high}), not held by a running member: {stray}",
            )
        self._steady = holders

    def check_steady(self) -> None:
        """Nothing moved in the steady state after the balance check."""
        if self._steady is None:
            return
        now = self.oracle_holders()
        moved = {k: (self._steady[k], h) for k, h in now.items() if self._steady[k] != h}
        if moved:
            self.checks.fail(self.now, f"partitions moved in the steady state: {moved}")

    def settle(self) -> None:
        """Faults stop: thaw everyone, and make sure somebody is there to consume."""
        self.note("SETTLE")
        for inst in self.instances:
            if inst.state == "frozen":
                self.thaw(inst)
        self.keep_a_consumer()

    def keep_a_consumer(self) -> None:
        if not any(
            i.state == "alive" and not i.core.fenced and not i.core.closing for i in self.live()
        ):
            self.join()


def _short(msg: object) -> str:
    name = type(msg).__name__
    fields = [f"{msg.client_id}:{msg.instance_id}"]  # type: ignore[attr-defined]
    if hasattr(msg, "partition"):
        fields.append(f"{msg.topic}/{msg.partition}")  # type: ignore[attr-defined]
    for attr in ("last_offset", "proposed_last_offset", "positions"):
        if hasattr(msg, attr):
            fields.append(str(getattr(msg, attr)))
    for topic, p, tenure, last in getattr(msg, "entries", ()):  # a MemberHeartbeat
        fields.append(f"{topic}/{p}@{tenure}:{last}")
    return f"{name} {' '.join(fields)}"


def _verdict(v: Verdict | None) -> str:
    """A verdict for the trace: a MemberHeartbeat's of one entry (a takeover's, say) is its
    entry's; of several, the sum, then each entry's where the sum hides what one did."""
    if v is None:
        return "?"
    entries = v.entries
    if len(entries) == 1:
        return _verdict(entries[0])
    said = f"accepted {v.effect.value}" if v.accepted else f"rejected {v.reason.value}"  # type: ignore[union-attr]
    if any(_verdict(e) != said for e in entries):
        said += f" [{', '.join(map(_verdict, entries))}]"
    return said


def run_seed(
    seed: int,
    *,
    fix: bool = True,
    trace: bool = False,
    rebalance: str | None = None,
    units: str | None = None,
    without: frozenset[str] = frozenset(),
    protocol_version: int | None = None,
    stale_answers: bool = False,
    seeks: bool | str = False,
    mirror: bool = False,
    epochs: bool = False,
    give_backs: bool = False,
) -> Result:
    return Sim(
        seed,
        fix=fix,
        trace=trace,
        rebalance=rebalance,
        units=units,
        without=without,
        protocol_version=protocol_version,
        stale_answers=stale_answers,
        seeks=seeks,
        mirror=mirror,
        epochs=epochs,
        give_backs=give_backs,
    ).run()


def parse_without(values: list[str]) -> frozenset[str]:
    """``--without a,b --without c`` -> the fixes to remove (``all-amo``: every one)."""
    names = {n.strip() for v in values for n in v.split(",") if n.strip()}
    if "all-amo" in names:
        names = (names - {"all-amo"}) | FIXES
    unknown = names - FIXES
    if unknown:
        raise argparse.ArgumentTypeError(
            f"no such fix: {', '.join(sorted(unknown))} (choose from "
            f"{', '.join(sorted(FIXES))} or all-amo)"
        )
    return frozenset(names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scenarios.sim", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=200, help="run seeds 0..N-1")
    parser.add_argument("--first", type=int, default=0, help="first seed of the range")
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--trace", action="store_true", help="print the seed's trace")
    parser.add_argument(
        "--digests",
        metavar="FILE",
        help="write 'seed sha256-of-trace' for every seed to FILE (- for stdout), to show that "
        "a refactor left every schedule as it was; run with PYTHONHASHSEED=0",
    )
    parser.add_argument(
        "--without-restart-fix",
        action="store_true",
        help="experiment: resume a restart takeover where it was read before (the restart bug); "
        "since protocol version 4 also without rules a and c and the core's surprise "
        "(and reserved-confirm)",
    )
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="FIX[,FIX...]",
        help="experiment: remove these safety fixes (" + ", ".join(sorted(FIXES)) + "; "
        "all-amo: every one of them)",
    )
    parser.add_argument(
        "--rebalance",
        choices=("balanced", "none"),
        help="every seed with this strategy (default: the seed chooses, 2 in 3 balanced)",
    )
    parser.add_argument(
        "--units",
        choices=("partitions", "tasks"),
        help="every seed claims these (tasks: ALO); default: half the ALO seeds claim tasks",
    )
    parser.add_argument(
        "--stale-answers",
        action="store_true",
        help="the stale-answer schedule: half the catch-up answers are stepped after the "
        "instance froze for 2·HB+ (a process stopped between its replay and its step)",
    )
    parser.add_argument(
        "--read-ahead",
        action="store_true",
        help="with --seeks: members read ahead as a Consumer does (prefetch up to 500), and "
        "retention and tail cuts land inside what a member read and has not handed out",
    )
    parser.add_argument(
        "--seeks",
        action="store_true",
        help="the user-hand schedule: user code seeks held partitions and the data log's "
        "start moves up (retention) during the faults (scenarios/sim_seeks.py)",
    )
    parser.add_argument(
        "--epochs",
        action="store_true",
        help="with --seeks: the edges tell a tail cut below what a member read by its "
        "records' leader epochs (KIP-320), as the network reader does",
    )
    parser.add_argument(
        "--mirror",
        action="store_true",
        help="the mirror schedule: Kafka's committed offsets of the group, written late by "
        "the members' offsets mirrors, start partitions with no position; half the seeds "
        "move from Kafka consumer groups (scenarios/sim_mirror.py)",
    )
    parser.add_argument(
        "--give-backs",
        action="store_true",
        help="AMO seeds: user code gives the end of a batch back, as Consumer.run does when "
        "its handler fails for good, and sometimes tries to give back an earlier batch's end",
    )
    args = parser.parse_args(argv)
    try:
        without = parse_without(args.without)
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    fix = not args.without_restart_fix
    opts: dict[str, object] = {"rebalance": args.rebalance, "units": args.units, "without": without}
    if args.stale_answers:
        opts["stale_answers"] = True
    if args.seeks:
        opts["seeks"] = "deep" if args.read_ahead else True
    if args.epochs:
        if not args.seeks:
            parser.error("--epochs goes with --seeks (its tail cuts)")
        opts["epochs"] = True
    if args.mirror:
        opts["mirror"] = True
    if args.give_backs:
        opts["give_backs"] = True
    if args.seed is not None:
        result = run_seed(args.seed, fix=fix, trace=args.trace, **opts)
        if args.trace:
            print("\n".join(result.trace))
        _report(result)
        return 1 if result.violations else 0
    seeds = range(args.first, args.first + args.seeds)
    if args.digests:
        return _write_digests(seeds, args.digests, fix=fix, **opts)
    failed: list[Result] = []
    sim_ms = tasks = amo = doubles = gave_back = 0
    bounded = truncations = gaps = 0
    upgrades = [0, 0, 0, 0, 0]  # seeds, rolling restarts done, restarts, old snapshots, passed
    takeover_rewinds = unnamed_rewinds = unnamed_seeds = 0  # positions moved back, allowed
    # seeds, seeks, seeks refused, retentions, tail cuts, fetches out of range, cuts told,
    # starts told a cut
    hand = [0] * 8
    mirrored = [0] * 3  # seeds, mirror writes, starts answered with a committed offset
    given = [0] * 4  # seeds, ends of batches given back, closes after one, earlier refused
    t0 = time.perf_counter()
    for seed in seeds:
        result = run_seed(seed, fix=fix, **opts)
        sim_ms += result.sim_ms
        tasks += result.mode.endswith("+tasks")
        amo += result.mode == "amo"
        if result.bounded is not None:
            bounded += 1
            truncations += result.bounded[0]
            gaps += result.bounded[1]
        if result.upgrade is not None:
            upgrades = [a + b for a, b in zip(upgrades, (1, *result.upgrade), strict=True)]
        if result.hand is not None:
            hand = [a + b for a, b in zip(hand, (1, *result.hand), strict=True)]
        if result.mirror is not None:
            mirrored = [a + b for a, b in zip(mirrored, (1, *result.mirror), strict=True)]
        if result.gave is not None:
            given = [a + b for a, b in zip(given, (1, *result.gave), strict=True)]
        takeover_rewinds += result.rewinds[0]
        unnamed_rewinds += result.rewinds[1]
        unnamed_seeds += result.rewinds[1] > 0
        if result.violations:
            failed.append(result)
            doubles += any("handed out twice" in v for v in result.violations)
            gave_back += any("handed out" in v and "released at" in v for v in result.violations)
    real = time.perf_counter() - t0
    removed = ",".join(sorted(without | (RESTART_BUG_EXPERIMENT if not fix else set()))) or "none"
    print(
        f"seeds run: {len(seeds)} ({tasks} claiming tasks, {amo} amo)  fixes removed: "
        f"{removed}  violations: {len(failed)} seeds (handed out twice: {doubles}, released "
        f"below a handed-out offset: {gave_back})  bounded-log seeds: {bounded} "
        f"({truncations} truncations, {gaps} gaps found)  upgrade seeds: {upgrades[0]} "
        f"({upgrades[1]} rolling restarts done, {upgrades[2]} restarts, {upgrades[3]} snapshots "
        f"of versions 4 and 5, {upgrades[4]} cold starts passed one over)  positions "
        f"moved back as the protocol allows: {takeover_rewinds} by restart takeovers, "
        f"{unnamed_rewinds} by late heartbeats naming no tenure ({unnamed_seeds} seeds)  "
        + (
            f"mirror seeds: {mirrored[0]} ({mirrored[1]} writes, {mirrored[2]} starts "
            "answered with a committed offset)  "
            if args.mirror
            else ""
        )
        + (
            f"user-hand seeds: {hand[0]} ({hand[1]} seeks, {hand[2]} refused, {hand[3]} "
            f"retentions, {hand[4]} tail cuts, {hand[5]} fetches out of range, {hand[6]} "
            f"cuts below a reader told by leader epochs, {hand[7]} starts after a cut)  "
            if args.seeks
            else ""
        )
        + (
            f"give-back seeds: {given[0]} ({given[1]} batch ends given back, {given[2]} closes "
            f"after one, {given[3]} earlier batches' ends refused)  "
            if args.give_backs
            else ""
        )
        + f"{len(seeds) / real:.1f} seeds/s  simulated/real time: {sim_ms / 1000 / real:.0f}x  "
        f"({real:.1f} s)"
    )
    for result in failed[:10]:
        _report(result)
    if failed:
        first = failed[0]
        again = run_seed(first.seed, fix=fix, trace=True, **opts)
        print(f"\ntrace of seed {first.seed} (replayed):")
        print("\n".join(again.trace[-80:]))
    return 1 if failed else 0


def trace_digest(result: Result) -> str:
    """One line per seed: what a refactor must leave unchanged (its trace and its verdicts)."""
    h = hashlib.sha256()
    for line in result.trace:
        h.update(line.encode())
        h.update(b"\n")
    for v in result.violations:
        h.update(v.encode())
    return f"{result.seed} {result.mode} {result.steps} {h.hexdigest()}"


def _write_digests(seeds: range, path: str, **opts: object) -> int:
    lines = [trace_digest(run_seed(seed, trace=True, **opts)) for seed in seeds]  # type: ignore[arg-type]
    text = "\n".join(lines) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)
    return 0


def _report(result: Result) -> None:
    status = "FAIL" if result.violations else "ok"
    print(
        f"seed {result.seed} ({result.mode}) {status}: {result.steps} steps, {result.sim_ms} ms simulated"
    )
    for v in result.violations[:3]:
        print(f"  {v}")
    if len(result.violations) > 3:
        print(f"  ... and {len(result.violations) - 3} more")


if __name__ == "__main__":
    sys.exit(main())
