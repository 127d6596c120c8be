"""The stage a scenario runs on, and what every stage shares: the member handle, the record
of a hand-out and the checks (ownership, draining, delivery, views).

The implementations (:mod:`~scenarios.stages.sim_stage`, :mod:`~scenarios.stages.thread_stage`,
:mod:`~scenarios.stages.process_stage`) import this module; it imports none of them, and
:mod:`scenarios.scenario` picks one for a run."""

from __future__ import annotations

import abc
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs

from rationalizer import membership_partition

from ..common import OnKafka, Report

__all__ = [
    "GroupChecks",
    "Handed",
    "Member",
    "Setup",
    "Stage",
    "StageError",
    "members_in_log",
]

Identity = tuple[str, Any]


def members_in_log(marshaler: Any, group: str) -> set[str]:
    """Live members of ``group`` in an observer Marshaler's replay, at the wall clock."""
    n = marshaler.coordination_partitions
    with marshaler.replay_paused():
        world = marshaler.worlds()[membership_partition(group, n)]
        return {m.client_id for m in world.members(group, int(time.time() * 1000))}


class StageError(Exception):
    """The stage could not do what the scenario asked (a member did not start, ...)."""


@attrs.define(frozen=True)
class Handed:
    """One offset a member handed to user code: when the poll that returned it started, and
    when it returned (stage time, :meth:`Stage.now`)."""

    partition: int
    offset: int
    poll_started: float
    handed_at: float


@attrs.frozen
class Setup:
    """One run of a scenario, as every stage is given it."""

    name: str
    seed: int
    mode: str
    #: heartbeat interval on the real stages, seconds (the simulator has its own)
    hb: float
    partitions: int
    #: "light": some slow, lost and failed calls; "delays": slow calls only
    faults: str = "light"
    #: keep the log here (real stages)
    data_dir: str | None = None
    #: the processes stage only: over Apache Kafka instead of logmarshal's broker
    kafka: OnKafka | None = None


@attrs.define(eq=False)
class Member:
    """A stage's handle on one member instance (a restart makes a new one)."""

    name: str
    client_id: str
    options: dict[str, Any]
    #: the stage's own object (a thread member, a process, a simulated instance)
    impl: Any = None

    def __repr__(self) -> str:
        return f"<member {self.name}>"


class GroupChecks:
    """The views and checks every scenario uses, written once over a few primitives
    (``holders``, ``identity``, ``believed``, ``alive``, ``fenced_at``, ``delivered``,
    ``wait_until``), which a :class:`Stage` (and the real-process harness) provide."""

    mode: str
    hb: float
    report: Report
    produced: dict[int, int]

    holders: Callable[[], dict[int, Identity | None]]
    positions: Callable[[], dict[int, int | None]]
    identity: Callable[[Any], Identity]
    believed: Callable[[Any], frozenset[int]]
    alive: Callable[[Any], bool]
    fenced_at: Callable[[Any], float | None]
    delivered: Callable[[Any], list[Handed]]
    wait_until: Callable[[Callable[[], object], float], bool]

    def _begin(
        self,
        name: str,
        seed: int,
        *,
        mode: str,
        hb: float,
        partitions: int,
        where: str,
        rng_key: str | None = None,
    ) -> None:
        """What a run is: its name and seed, the seeded choices of the scenario (``rng``),
        mode, heartbeat, partitions, and the report (mode ``"<mode>, <where>"``)."""
        self.name = name
        self.seed = seed
        self.rng = random.Random(rng_key or f"{name}/{seed}")
        self.mode = mode
        self.hb = hb
        self.partitions = partitions
        self.report = Report(name, seed, f"{mode}, {where}")

    def all_offsets(self) -> set[tuple[int, int]]:
        return {(p, o) for p, n in self.produced.items() for o in range(n)}

    def owned_by(self, members: list[Any]) -> bool:
        """Every partition is held by one of ``members``, per the log."""
        identities = {self.identity(m) for m in members}
        return all(h in identities for h in self.holders().values())

    def held_by(self, member: Any) -> set[int]:
        """The partitions the log says ``member`` holds."""
        me = self.identity(member)
        return {p for p, h in self.holders().items() if h == me}

    def holding(self, members: list[Any]) -> int:
        """How many of ``members`` hold at least one partition, per the log."""
        held = {h for h in self.holders().values() if h is not None}
        return sum(1 for m in members if self.identity(m) in held)

    def handed(self, members: list[Any]) -> list[tuple[int, int]]:
        return [(x.partition, x.offset) for m in members for x in self.delivered(m)]

    def drained(self, members: list[Any], *, lost_ok: bool | None = None) -> bool:
        """The last produced record of every partition was handed out by one of ``members``
        (a position alone is not enough: in AMO it moves when a batch is reserved, just
        before it is handed out), or, with ``lost_ok`` (default: in AMO), reserved in the
        log and lost, as AMO allows (a reservation whose outcome its writer never learned;
        then the end may be seen a moment before a pending hand-out)."""
        last: dict[int, int] = {}
        for p, o in self.handed(members):
            last[p] = max(o, last.get(p, -1))
        behind = [p for p, n in self.produced.items() if n and last.get(p, -1) < n - 1]
        if not behind or not (self.mode == "amo" if lost_ok is None else lost_ok):
            return not behind
        positions = self.positions()
        return all((positions[p] or 0) >= self.produced[p] for p in behind)

    def delivery(self, members: list[Any]) -> None:
        """ALO: every produced offset handed out at least once; AMO: none twice."""
        counts = Counter(self.handed(members))
        wanted = self.all_offsets()
        if self.mode == "amo":
            twice = sorted(o for o, c in counts.items() if c > 1)
            self.report.figures["lost (allowed in AMO)"] = len(wanted - set(counts))
            self.report.check(
                "AMO: no offset handed out twice",
                not twice,
                f"{len(twice)} repeated, e.g. {twice[:5]}",
            )
        else:
            missing = sorted(wanted - set(counts))
            self.report.figures["repeated (allowed in ALO)"] = sum(c - 1 for c in counts.values())
            self.report.check(
                "ALO: every produced offset handled at least once",
                not missing,
                f"{len(missing)} never handled, e.g. {missing[:5]}",
            )

    def one_holder_each(self, members: list[Any]) -> None:
        """Each partition is held by a live, unfenced member, and the members' own views
        agree with the log (nobody left believing it holds what the log gave away). A
        partition the target is moving when this is called (released, its next holder's claim
        not replayed yet) is waited for, up to 4·HB."""
        live = {self.identity(m): m for m in members if self.alive(m) and self.fenced_at(m) is None}

        def unheld() -> list[int]:
            return [p for p, h in self.holders().items() if h not in live]

        self.wait_until(lambda: not unheld(), 4 * self.hb)
        holders = self.holders()
        unowned = [p for p, h in holders.items() if h not in live]
        self.report.check(
            "every partition has exactly one holder, a live member",
            not unowned,
            f"not held by a live member: {unowned} ({holders})",
        )

        def agree() -> bool:
            holders = self.holders()
            believed = Counter(p for m in live.values() for p in self.believed(m))
            return max(believed.values(), default=0) <= 1 and all(
                p in self.believed(live[h]) for p, h in holders.items() if h in live
            )

        ok = self.wait_until(agree, 4 * self.hb)
        views = {m.name: sorted(self.believed(m)) for m in live.values()}
        self.report.check("each member's own claims match the log", ok, str(views))


class Stage(GroupChecks, abc.ABC):
    """Members of one group consuming ``partitions`` partitions of one topic, with the
    faults a scenario injects and what the log and the members say happened.

    Times (``now``, ``sleep``, ``wait_until``, :class:`Handed`) are seconds of the stage's
    clock: the wall clock on real stages, the simulated clock in the simulator. ``hb`` is the
    heartbeat interval the members use; scenarios express their bounds in it.
    """

    kind: str = "?"
    #: can freeze a member's I/O while its worker keeps polling (a network partition)
    partial_freeze: bool = False

    def __init__(self, setup: Setup, hb: float | None = None) -> None:
        # the scenario's seeded choices (rng) are the same on every stage
        self._begin(
            setup.name,
            setup.seed,
            mode=setup.mode,
            hb=setup.hb if hb is None else hb,
            partitions=setup.partitions,
            where=self.kind,
        )
        self.members: list[Member] = []
        self._counts: Counter[str] = Counter()

    def _name(self, client_id: str) -> str:
        n = self._counts[client_id]
        self._counts[client_id] += 1
        return client_id if n == 0 else f"{client_id}.{n}"

    def failover_bound(self, moved: int) -> tuple[float, str]:
        """How long survivors may take to own ``moved`` partitions of a dead member, and
        the bound's formula: 2·HB, then a margin of one HB for the claim pass, a durable
        write and the replay on a loaded 2-core machine."""
        return 3 * self.hb, "2·HB + margin"

    # -- members -------------------------------------------------------------------------------

    @abc.abstractmethod
    def start(self, client_id: str, **options: Any) -> Member:
        """Start a member (Consumer options: ``greedy``, ``max_claims``); it has joined when
        this returns. Raises :class:`StageError` if it does not start."""

    def start_group(self, client_ids: list[str], **options: Any) -> list[Member]:
        """Start members (together where the stage can: then none finds everything taken
        before the others join)."""
        return [self.start(c, **options) for c in client_ids]

    def group_owning_all(self, client_ids: list[str], *, first: int) -> list[Member] | None:
        """``first`` records to every partition, then members started together, once they
        own every partition; None (after a failed check) if they do not. Non-greedy members
        take one partition per pass: one that starts late on a loaded machine may find
        nothing left (there is no rebalancing), which is fine."""
        self.produce(first)
        members = self.start_group(client_ids)
        ok = self.wait_until(lambda: self.owned_by(members), 15)
        if not self.report.check("the members own every partition", ok):
            return None
        self.report.figures["members holding some"] = self.holding(members)
        return members

    def pick_holder(self, members: list[Member]) -> tuple[Member, list[Member]]:
        """One of ``members`` that holds a partition per the log, chosen by the seed, and
        the others."""
        chosen = self.rng.choice([m for m in members if self.held_by(m)])
        return chosen, [m for m in members if m is not chosen]

    @abc.abstractmethod
    def kill(self, member: Member) -> None:
        """Stop it dead: no more hand-outs, no writes, nothing released (SIGKILL)."""

    @abc.abstractmethod
    def freeze(self, member: Member, worker_too: bool = True) -> None:
        """Hang it (SIGSTOP). ``worker_too=False``, where :attr:`partial_freeze`: only its I/O
        hangs and it keeps polling, as behind a network partition."""

    @abc.abstractmethod
    def thaw(self, member: Member) -> None:
        """Let a frozen member go on where it was (SIGCONT)."""

    @abc.abstractmethod
    def _start_again(self, member: Member, before: Callable[[], None]) -> Member:
        """A new instance of ``member``'s client; ``before`` runs just before it connects."""

    def restart(self, member: Member, old: str = "kill", **options: Any) -> Member:
        """A new instance under the same client_id and options (``options`` override some:
        an operator's new configuration). The old one is first killed (``old="kill"``), hung
        (``"freeze"``: a zombie) or left running (``"keep"``)."""
        act = {"kill": self.kill, "freeze": self.freeze, "keep": lambda m: None}[old]
        template = (
            attrs.evolve(member, options={**member.options, **options}) if options else member
        )
        return self._start_again(template, lambda: act(member))

    @abc.abstractmethod
    def leave(self, member: Member) -> bool:
        """Close it gracefully (commits flushed, claims released); True if it did so."""

    @abc.abstractmethod
    def alive(self, member: Member) -> bool:
        """Neither killed nor closed."""

    # -- data ----------------------------------------------------------------------------------

    produced: dict[int, int]

    @abc.abstractmethod
    def produce(self, per_partition: int) -> None:
        """The next ``per_partition`` numbered records to every partition, now."""

    @abc.abstractmethod
    def produce_in_background(self, per_partition: int, seconds: float) -> None:
        """Keep a stream flowing for ``seconds`` while the scenario goes on."""

    @abc.abstractmethod
    def wait_produced(self) -> None:
        """Until the background stream is written."""

    # -- what the log and the members say ------------------------------------------------------

    @abc.abstractmethod
    def holders(self) -> dict[int, Identity | None]:
        """Partition -> (client_id, instance_id) holding it, from a replay of the log."""

    @abc.abstractmethod
    def announced(self) -> set[str]:
        """The client_ids the log has as live members of the group (protocol version 2)."""

    @abc.abstractmethod
    def positions(self) -> dict[int, int | None]:
        """Partition -> the offset the group resumes at, from a replay of the log."""

    @abc.abstractmethod
    def identity(self, member: Member) -> Identity:
        """(client_id, instance_id), as the log names the member."""

    @abc.abstractmethod
    def believed(self, member: Member) -> frozenset[int]:
        """The partitions the member itself believes it holds."""

    @abc.abstractmethod
    def fenced_at(self, member: Member) -> float | None:
        """When the member was seen to know it is fenced (None: not yet)."""

    @abc.abstractmethod
    def delivered(self, member: Member) -> list[Handed]:
        """Everything the member handed to user code, in order."""

    # -- time ----------------------------------------------------------------------------------

    @abc.abstractmethod
    def now(self) -> float: ...

    @abc.abstractmethod
    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass (the simulator runs its scheduler that far)."""

    @abc.abstractmethod
    def wait_until(self, predicate: Callable[[], object], timeout: float) -> bool:
        """Until ``predicate()`` (True) or ``timeout`` seconds passed (False)."""

    def close(self) -> None:
        """Stop everything the stage started."""
