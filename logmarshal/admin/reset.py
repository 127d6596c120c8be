"""Moving a live group: the reset plan (pure) and its execution through ReleaseGroup.

Kafka can only move the offsets of an *inactive* group, because its members would overwrite
them. Here the log decides who may write a position, so the admin can move a live group:

1. write ``ReleaseGroup(expiry E)`` to **every** coordination partition: every claim of the
   group is void and, until E, only this admin's heartbeats change anything (PROTOCOL.md,
   rule 2/3);
2. replay the log through those records: the pause must have landed everywhere, under this
   admin (else no position is written: another admin's pause replaced ours somewhere). From
   here on no member can move a position, so the target is resolved now, from this world and
   the log ends of now: a position or a log end read before the pause would miss what a live
   AMO holder reserved and handed out in between (``current``, ``shift``, ``latest``, a
   ``datetime`` past the last record, any target clamped to the log end), and rewinding that
   hands its offsets out twice (docs/protocol-notes.md);
3. write one admin Heartbeat per partition of the plan, ``last_offset = new - 1``: accepted
   as ``POSITION_SET`` while the pause lasts;
4. replay the log and check every one of those records got the expected verdict.

Members see their claims voided in their own replay and drop them; from E on the partitions
are unclaimed at the positions the admin set, and the members claim them again there.

Why ``E >= now + 2·HB_max``: a member cut off from the log cannot see the ReleaseGroup, but it
stops handing out messages by itself once nothing of its own was accepted for ``2·HB`` (its
lease, self-fencing). A pause at least that long means no member can still be working from
an old position when another one claims the partition at the new one.

Positions follow Kafka: the *new offset* is the next offset the group will consume.
"""

from __future__ import annotations

import csv
import io
import logging
import random
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from rationalizer import (
    MAX_HEARTBEAT_INTERVAL_MS,
    Effect,
    Heartbeat,
    ReleaseGroup,
    Verdict,
    coordination_partition,
    encode,
    sign,
)
from rationalizer._messages import valid_id, valid_topic
from storage import NewRecord

from .._coordlog import COORDINATION_TOPIC
from ..clock import SYSTEM_CLOCK, Clock
from ..cluster import Cluster
from ..errors import UnknownTopic
from .errors import AdminError
from .keys import AdminKeys
from .reader import CoordinationState, CoordRecord, read_coordination
from .times import format_ms, parse_whole

__all__ = [
    "DEFAULT_MIN_PAUSE_MS",
    "AdminIdentity",
    "Execution",
    "Plan",
    "PlanRow",
    "Target",
    "WrittenRecord",
    "current_positions",
    "execute",
    "lookup_time_offsets",
    "min_pause_ms",
    "new_admin",
    "parse_plan_csv",
    "parse_topic_scope",
    "plan_from_log",
    "plan_reset",
    "plan_to_csv",
    "read_bounds",
    "resolve_scope",
    "wake_halted",
]

log = logging.getLogger(__name__)

#: The default pause is never shorter than this, so members on a slow replay still see it.
DEFAULT_MIN_PAUSE_MS = 5_000
#: The default pause is this much longer than 2·HB: the pause must last 2·HB from where its
#: ReleaseGroup lands in log time, and one of exactly 2·HB from our clock always landed
#: short of it by the write's own delay (so every default reset of a group heartbeating
#: every 2.5 s or more wrote its ReleaseGroups twice, the second round to move the end)
DEFAULT_PAUSE_MARGIN_MS = 1_000
TARGET_KINDS = ("earliest", "latest", "current", "offset", "shift", "datetime", "file")
#: targets whose figures follow the group's position or the log end, which move until the
#: pause lands (every target is resolved again then: a clamp to the log end moves too)
RELATIVE_KINDS = frozenset({"current", "shift", "latest", "datetime"})

TopicPartition = tuple[str, int]


# --------------------------------------------------------------------------- identity


@attrs.frozen
class AdminIdentity:
    """Who writes: ``client_id`` (default ``admin@<host>``) and a random ``instance_id``."""

    client_id: str
    instance_id: str


def new_admin(client_id: str | None = None, rng: random.Random | None = None) -> AdminIdentity:
    client = client_id or f"admin@{socket.gethostname() or 'localhost'}"
    if not valid_id(client):
        raise AdminError(f"invalid client id {client!r}")
    rng = rng if rng is not None else random.SystemRandom()
    return AdminIdentity(client, f"{rng.getrandbits(64):016x}")


# --------------------------------------------------------------------------- scope


def parse_topic_scope(text: str) -> tuple[str, tuple[int, ...] | None]:
    """``T`` (every partition) or ``T:0,2,5``."""
    topic, sep, rest = text.partition(":")
    if not valid_topic(topic):
        raise AdminError(f"invalid topic in --topic {text!r}")
    if not sep:
        return topic, None
    try:
        parts = tuple(parse_whole(p) for p in rest.split(","))
    except ValueError:
        raise AdminError(
            f"malformed --topic {text!r}: expected TOPIC or TOPIC:P,P,... with partition numbers"
        ) from None
    if any(p < 0 for p in parts):
        raise AdminError(f"malformed --topic {text!r}: partitions are never negative")
    return topic, tuple(dict.fromkeys(parts))


def resolve_scope(
    cluster: Cluster,
    state: CoordinationState,
    group: str,
    topics: Sequence[tuple[str, tuple[int, ...] | None]],
    all_topics: bool,
) -> list[TopicPartition]:
    """The partitions a reset applies to; unknown topics and partitions are errors.

    ``--all-topics`` means every topic the group has coordination state for, as
    kafka-consumer-groups means every topic the group has committed offsets for.
    """
    tasks = sorted({s.topic for s in state.partitions(group) if s.positions is not None})
    if tasks:
        # (its members key their positions by task, not by the topics the operator names: a
        # reset of those was confirmed and moved nothing, one of the tasks was "unknown")
        raise AdminError(
            f"group {group!r} is a streams application's: its members hold tasks "
            f"({', '.join(tasks[:3])}{', ...' if len(tasks) > 3 else ''}) whose positions are "
            "the inputs their state reflects, kept with that state in its changelogs; group "
            "reset cannot move them (to reprocess the input, run the application under a new "
            "application id)"
        )
    if topics and all_topics:
        raise AdminError("give either --topic or --all-topics, not both")
    if not topics and not all_topics:
        raise AdminError("no scope: give --topic TOPIC[:P,...] (repeatable) or --all-topics")
    wanted = [(t, None) for t in state.topics(group)] if all_topics else list(topics)
    if not wanted:
        raise AdminError(f"group {group!r} has no topics in __marshal (use --topic)")
    out: dict[TopicPartition, None] = {}
    for topic, parts in wanted:
        try:
            n = cluster.partitions(topic)
        except UnknownTopic:
            raise AdminError(f"unknown topic {topic!r}") from None
        if parts is None:
            out.update(dict.fromkeys((topic, p) for p in range(n)))
            continue
        for p in parts:
            if p >= n:
                raise AdminError(f"topic {topic!r} has no partition {p} (it has {n})")
            out[(topic, p)] = None
    return sorted(out)


# --------------------------------------------------------------------------- plan


@attrs.frozen
class Target:
    """What to reset to; exactly one kind. ``value``: offset, shift, epoch ms, or file rows."""

    kind: str
    value: int | Mapping[TopicPartition, int] | None = None

    def __attrs_post_init__(self) -> None:
        if self.kind not in TARGET_KINDS:
            raise ValueError(f"unknown reset target {self.kind!r}")

    @property
    def relative(self) -> bool:
        """Computed from the group's position or the log end (``current``, ``shift``,
        ``latest``, ``datetime``): its figures before the pause are provisional."""
        return self.kind in RELATIVE_KINDS


@attrs.frozen
class PlanRow:
    topic: str
    partition: int
    current: int | None  # the group's position when planned (None: it has none)
    new: int


@attrs.frozen
class Plan:
    """New positions; ``target`` (set by :func:`plan_reset`) lets :func:`execute` resolve the
    plan again after its pause landed. A plan without a target is applied as is."""

    group: str
    rows: tuple[PlanRow, ...]
    warnings: tuple[str, ...] = ()
    target: Target | None = None

    @property
    def relative(self) -> bool:
        """True when the figures are provisional: recomputed when the pause lands."""
        return self.target is not None and self.target.relative


def plan_reset(
    group: str,
    partitions: Sequence[TopicPartition],
    current: Mapping[TopicPartition, int | None],
    bounds: Mapping[TopicPartition, tuple[int, int]],
    target: Target,
    time_offsets: Mapping[TopicPartition, int | None] | None = None,
) -> Plan:
    """New positions for ``partitions`` (pure). Like kafka-consumer-groups:

    - ``current`` without a position, and ``datetime`` with no record at or after the time,
      go to the log end (with a warning);
    - ``shift`` needs a position (error otherwise);
    - every target outside ``[earliest, latest]`` is clamped to it, with a warning.

    ``time_offsets`` are the time-index answers for a ``datetime`` target; ``file`` targets
    carry their own rows and ignore ``partitions`` beyond checking them. The rows are
    provisional: :func:`execute` computes them again from the world after its ReleaseGroup
    landed and the log ends of then, whatever ``current`` and ``bounds`` say here.
    """
    warnings: list[str] = []
    rows = []
    kind = target.kind
    if kind == "file":
        assert isinstance(target.value, Mapping)
        partitions = sorted(target.value)
    for key in partitions:
        topic, partition = key
        earliest, latest = bounds[key]
        now = current.get(key)
        if kind == "earliest":
            new = earliest
        elif kind == "latest":
            new = latest
        elif kind == "current":
            if now is None:
                warnings.append(
                    f"{topic}/{partition}: the group has no position; using the log end {latest}"
                )
                new = latest
            else:
                new = now
        elif kind == "offset":
            assert isinstance(target.value, int)  # an offset target carries its offset
            new = target.value
        elif kind == "shift":
            if now is None:
                raise AdminError(
                    f"cannot shift {topic}/{partition}: the group has no position for it"
                )
            assert isinstance(target.value, int)  # a shift target carries its shift
            new = now + target.value
        elif kind == "datetime":
            found = (time_offsets or {}).get(key)
            if found is None:
                warnings.append(
                    f"{topic}/{partition}: no record at or after that time; using the log end "
                    f"{latest}"
                )
                new = latest
            else:
                new = found
        else:  # file
            assert isinstance(target.value, Mapping)  # (checked above)
            new = target.value[key]
        if new < earliest:
            warnings.append(
                f"{topic}/{partition}: new offset {new} is before the earliest offset {earliest}; "
                f"using {earliest}"
            )
            new = earliest
        elif new > latest:
            warnings.append(
                f"{topic}/{partition}: new offset {new} is after the log end {latest}; "
                f"using {latest}"
            )
            new = latest
        rows.append(PlanRow(topic, partition, now, new))
    return Plan(group, tuple(rows), tuple(warnings), target)


def lookup_time_offsets(
    cluster: Cluster, partitions: Iterable[TopicPartition], time_ms: int
) -> dict[TopicPartition, int | None]:
    """The time index: first offset stamped at or after ``time_ms`` per partition."""
    return {(t, p): cluster.offset_for_time(t, p, time_ms) for t, p in partitions}


def current_positions(
    state: CoordinationState, group: str, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """The group's position per partition as ``state`` shows it: the next offset to consume,
    ``max(last_offset, claimed_through) + 1``, so an AMO holder's reservations count as
    consumed. None where the group has none (never consumed: a member starts it at the
    Kafka group's committed offset where the offsets mirror reads one, else by its reset
    policy, as a Kafka consumer does; docs/admin.md, "mirrored offsets")."""
    view = state.view
    out: dict[TopicPartition, int | None] = {}
    for topic, partition in partitions:
        world = None if view is None else view.world_for(topic, partition)
        s = None if world is None else world.partition_state(group, topic, partition)
        out[(topic, partition)] = s.resume_offset if s is not None and s.has_position else None
    return out


def read_bounds(
    cluster: Cluster, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, tuple[int, int]]:
    """``(earliest, log end)`` per partition, as the cluster reports them now."""
    return {
        (t, p): (cluster.earliest_offset(t, p), cluster.latest_offset(t, p)) for t, p in partitions
    }


def plan_from_log(
    cluster: Cluster,
    state: CoordinationState,
    group: str,
    partitions: Sequence[TopicPartition],
    target: Target,
) -> Plan:
    """A plan from the log as ``state`` and the cluster show it now: the one way the CLI and
    :func:`execute` (for a relative target, after its pause landed) turn a target into rows."""
    time_offsets = None
    if target.kind == "datetime":
        assert isinstance(target.value, int)
        time_offsets = lookup_time_offsets(cluster, partitions, target.value)
    return plan_reset(
        group,
        partitions,
        current_positions(state, group, partitions),
        read_bounds(cluster, partitions),
        target,
        time_offsets,
    )


# --------------------------------------------------------------------------- CSV


def plan_to_csv(plan: Plan) -> str:
    """``topic,partition,offset`` per row, no header: what kafka-consumer-groups --export
    writes for one group, so either tool reads the other's file."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in plan.rows:
        writer.writerow((row.topic, row.partition, row.new))
    return out.getvalue()


def parse_plan_csv(text: str, group: str, source: str = "CSV") -> dict[TopicPartition, int]:
    """Read a plan: ``topic,partition,offset`` rows (kafka-consumer-groups' single-group
    export), or ``group,topic,partition,offset`` rows (its multi-group export; rows of other
    groups are skipped). An optional header line naming those columns is accepted."""
    rows = [
        (n, [c.strip() for c in cells])
        for n, cells in enumerate(csv.reader(io.StringIO(text.removeprefix("\ufeff"))), 1)
        if cells and any(c.strip() for c in cells)
    ]
    if rows and [c.lower() for c in rows[0][1]] in (
        ["topic", "partition", "offset"],
        ["group", "topic", "partition", "offset"],
    ):
        rows = rows[1:]
    if not rows:
        raise AdminError(f"{source}: no rows (expected topic,partition,offset lines)")
    width = len(rows[0][1])
    out: dict[TopicPartition, int] = {}
    for n, cells in rows:
        where = f"{source}:{n}"
        if len(cells) != width or width not in (3, 4):
            raise AdminError(
                f"{where}: expected topic,partition,offset (or group,topic,partition,offset), "
                f"got {len(cells)} columns"
            )
        if width == 4:
            if cells[0] != group:
                continue
            cells = cells[1:]
        topic, partition_text, offset_text = cells
        if not valid_topic(topic):
            raise AdminError(f"{where}: invalid topic {topic!r}")
        try:
            partition, offset = parse_whole(partition_text), parse_whole(offset_text)
        except ValueError:
            raise AdminError(f"{where}: partition and offset must be whole numbers") from None
        if partition < 0 or offset < 0:
            raise AdminError(f"{where}: partition and offset cannot be negative")
        if (topic, partition) in out:
            raise AdminError(f"{where}: {topic}/{partition} appears twice")
        out[(topic, partition)] = offset
    if not out:
        raise AdminError(f"{source}: no rows for group {group!r}")
    return out


# --------------------------------------------------------------------------- execution


def min_pause_ms(state: CoordinationState, group: str) -> int:
    """2·HB_max: the shortest pause that lets every old holder self-fence first."""
    return 2 * (state.hb_max_ms(group) or 0)


@attrs.frozen
class WrittenRecord:
    kind: str  # release_group | position
    coord_partition: int
    offset: int
    log_append_time: int
    topic: str | None = None
    partition: int | None = None
    verdict: Verdict | None = None

    @property
    def ok(self) -> bool:
        v = self.verdict
        want = Effect.GROUP_PAUSED if self.kind == "release_group" else Effect.POSITION_SET
        return v is not None and v.accepted and v.effect is want

    def describe_verdict(self) -> str:
        v = self.verdict
        if v is None:
            return "no verdict (not replayed)"
        if v.accepted:
            return f"accepted ({v.effect.value if v.effect else '?'})"
        return f"rejected ({v.reason.value if v.reason else '?'})"


@attrs.frozen
class Execution:
    """What was written and how replay judged it. ``rows`` are the positions written (for a
    relative target: resolved after the pause landed; ``current`` is then the position as of
    the pause); ``planned`` the rows of the plan given, ``warnings`` those of ``rows``."""

    group: str
    admin: AdminIdentity
    pause_until_ms: int
    pause_ms: int
    rows: tuple[PlanRow, ...]
    written: tuple[WrittenRecord, ...]
    planned: tuple[PlanRow, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(w.ok for w in self.written)

    @property
    def rejected(self) -> list[WrittenRecord]:
        return [w for w in self.written if not w.ok]


def execute(
    cluster: Cluster,
    state: CoordinationState,
    plan: Plan,
    *,
    admin: AdminIdentity,
    pause_ms: int | None = None,
    admin_keys: AdminKeys | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Execution:
    """Pause ``plan.group`` and set the plan's positions (module docstring); confirm by replay.

    ``pause_ms`` defaults to ``max(2·HB_max + 1 s, 5 s)``; one shorter than 2·HB_max is
    refused. It runs from where the ReleaseGroup lands in log time: if it landed later
    than our clock planned, it is written again to end ``pause_ms`` after it landed.
    An empty plan only pauses. With a key for the group in ``admin_keys`` every record is
    tagged, and the confirming replay authenticates as members given the same key do.

    A plan with a target is resolved again, for the same partitions, from the world replayed
    after the ReleaseGroup landed everywhere and the log ends of then: what a live holder
    reserved and handed out after ``plan`` was made is never rewound (but by a target below
    it, which the operator chose). If the pause did not land (a rejected or unreplayed
    ReleaseGroup), no position is written and the result is not ``ok``. If another admin's
    pause replaced ours in some coordination partition meanwhile, no position is written
    either (AdminError): two resets at once would leave the group at a mix of both targets.
    """
    group = plan.group
    if state.n == 0:
        raise AdminError("there is no __marshal topic: no group ever coordinated here")
    floor = min_pause_ms(state, group)
    if pause_ms is None:
        pause_ms = max(floor + DEFAULT_PAUSE_MARGIN_MS, DEFAULT_MIN_PAUSE_MS)
    elif pause_ms < floor:
        raise AdminError(
            f"a pause of {pause_ms} ms is too short for group {group!r}: its members' longest "
            f"heartbeat interval is {floor // 2} ms, so the pause must be at least {floor} ms "
            "(2·HB) for every old holder to stop before anyone claims again"
        )
    if pause_ms <= 0:
        raise AdminError("the pause must be longer than 0 ms")
    key = admin_keys.key_for(group) if admin_keys else None
    expiry = round(clock.time() * 1000) + pause_ms
    written = _release_everywhere(cluster, state.n, group, admin, expiry, key, clock)
    # The expiry is log time; we computed it from our clock. If the ReleaseGroup landed so
    # late in log time (its write's delay; the log's clock ahead of ours) that less than
    # 2·HB of the pause is left after it, leases it voided could outlast it: move it out.
    stamps = [w.log_append_time for w in written if w.log_append_time >= 0]
    if stamps and expiry - max(stamps) < max(floor, 1):
        corrected = max(stamps) + pause_ms
        ahead = max(stamps) - round(clock.time() * 1000)
        if ahead > 0:  # (stamped past our clock once written: not the write's delay)
            log.warning(
                "the log's clock is %d ms ahead of ours; extending the pause to end at %d",
                ahead,
                corrected,
            )
        else:
            log.info(
                "the pause landed %d ms after it was planned; extending it to end %d ms "
                "after it landed, at %d",
                max(stamps) + pause_ms - expiry,
                pause_ms,
                corrected,
            )
        expiry = corrected
        written = _release_everywhere(cluster, state.n, group, admin, expiry, key, clock)
    rows, warnings = plan.rows, plan.warnings
    if rows:
        paused, written = _replay(cluster, written, admin_keys)
        if not all(w.ok for w in written):
            log.error("the pause of group %s did not land everywhere: no position written", group)
            return _finish(Execution(group, admin, expiry, pause_ms, (), tuple(written), rows))
        _check_still_ours(paused, group, admin, expiry)
        if plan.target is not None:
            keys = [(r.topic, r.partition) for r in rows]
            try:
                resolved = plan_from_log(cluster, paused, group, keys, plan.target)
            except AdminError as exc:
                raise AdminError(
                    f"{exc}; group {group!r} stays paused until {format_ms(expiry)} at "
                    "unchanged positions"
                ) from None
            rows, warnings = resolved.rows, resolved.warnings
            for now, then in zip(rows, plan.rows, strict=True):
                if now.current != then.current:
                    log.info(
                        "%s/%d: the group moved from %s to %s before the pause landed; "
                        "new position %d (planned %d)",
                        now.topic,
                        now.partition,
                        then.current,
                        now.current,
                        now.new,
                        then.new,
                    )
    hb = _admin_hb(state, group)
    # one produce call per coordination partition: the positions land within a few round
    # trips of each other, not one per partition (a reset cut short part way, its process
    # killed or stalled past the pause, leaves the group partly moved: docs/admin.md)
    by_cp: dict[int, list[PlanRow]] = {}
    for row in rows:
        by_cp.setdefault(coordination_partition(row.topic, row.partition, state.n), []).append(row)
    for cp, cp_rows in sorted(by_cp.items()):
        msgs = [_position_beat(admin, group, row, hb) for row in cp_rows]
        landed = _write_many(cluster, cp, [sign(m, key) if key else m for m in msgs], clock)
        written.extend(
            WrittenRecord("position", cp, offset, stamp, topic=row.topic, partition=row.partition)
            for row, (offset, stamp) in zip(cp_rows, landed, strict=True)
        )
    confirmed = _confirm(cluster, written, admin_keys)
    return _finish(
        Execution(group, admin, expiry, pause_ms, rows, tuple(confirmed), plan.rows, warnings)
    )


def _admin_hb(state: CoordinationState, group: str) -> int:
    """The HB of the admin's position heartbeats: the group's longest."""
    return min(max(state.hb_max_ms(group) or 1000, 1), MAX_HEARTBEAT_INTERVAL_MS)


def _position_beat(admin: AdminIdentity, group: str, row: PlanRow, hb: int) -> Heartbeat:
    """The admin's heartbeat that sets ``row``'s position while its pause lasts."""
    return Heartbeat(
        client_id=admin.client_id,
        instance_id=admin.instance_id,
        group_id=group,
        topic=row.topic,
        partition=row.partition,
        last_offset=row.new - 1,
        heartbeat_interval_ms=hb,
    )


def wake_halted(
    cluster: Cluster,
    state: CoordinationState,
    result: Execution,
    *,
    admin_keys: AdminKeys | None = None,
    clock: Clock = SYSTEM_CLOCK,
    sleep: Callable[[float], None] = time.sleep,
    tries: int = 20,
) -> list[int]:
    """After a reset's pause, where ``state`` saw a gap (:attr:`CoordinationState.gaps`): a
    member halted by it takes up what the reset positioned once its replay's log time is
    past the pause's end, and log time moves only with a record in that coordination
    partition. With every member of the group halted and no other group writing there,
    none came, and the group stayed halted (found on Kafka, 2026-12-06). So, once the pause
    is over by our clock, each such partition where nothing landed since gets the reset's
    first position there again: after the pause a heartbeat of no holder (NOT_HOLDER: no
    effect), inside it (a log clock behind ours) the same position again, and then another
    try. Waits out the pause; returns the coordination partitions written to."""
    rows: dict[tuple[str | None, int | None], PlanRow] = {
        (r.topic, r.partition): r for r in result.rows
    }
    firsts: dict[int, PlanRow] = {}
    for w in result.written:
        if w.kind == "position" and w.coord_partition in state.gaps and w.ok:
            firsts.setdefault(w.coord_partition, rows[w.topic, w.partition])
    woken: list[int] = []
    if not firsts:
        return woken
    key = admin_keys.key_for(result.group) if admin_keys else None
    hb = _admin_hb(state, result.group)
    while (wait_ms := result.pause_until_ms + 1 - clock.time() * 1000) > 0:
        sleep(min(wait_ms, 1000) / 1000)  # (whatever the pause's length: tries count after it)
    for cp, row in sorted(firsts.items()):
        for _ in range(tries):
            if _last_log_time(cluster, cp) > result.pause_until_ms:
                break  # (a record landed after the pause: the halted replay moved past it)
            beat = _position_beat(result.admin, result.group, row, hb)
            _, stamp = _write(cluster, cp, sign(beat, key) if key else beat, clock)
            if stamp > result.pause_until_ms:
                woken.append(cp)
                break
            sleep(0.1)  # (landed inside the pause: the log's clock is behind ours)
    return woken


def _last_log_time(cluster: Cluster, cp: int) -> int:
    """The log time of the last record of ``__marshal/cp`` (-1 if it has none)."""
    end = cluster.latest_offset(COORDINATION_TOPIC, cp)
    if end <= cluster.earliest_offset(COORDINATION_TOPIC, cp):
        return -1
    last = cluster.fetch(COORDINATION_TOPIC, cp, end - 1)
    return last[-1].timestamp if last else -1


def _check_still_ours(
    paused: CoordinationState, group: str, admin: AdminIdentity, expiry: int
) -> None:
    """Before any position is written: the pause is this admin's in every coordination
    partition. Rule 2 lets a later ReleaseGroup replace it, and two resets writing at once
    would leave the group at a mix of both targets (each partition at whichever came last)."""
    admins = {cp: world.pause_admin(group) for cp, world in enumerate(paused.worlds)}
    others = {cp: a for cp, a in admins.items() if a is not None and a != attrs.astuple(admin)}
    if others:
        who = ", ".join(sorted({f"{a[0]}/{a[1]}" for a in others.values()}))
        raise AdminError(
            f"another admin ({who}) paused group {group!r} after this reset did (coordination "
            f"partition(s) {', '.join(map(str, sorted(others)))}): no position was written; "
            "run the reset again once the other one is done"
        )
    over = sorted(cp for cp, a in admins.items() if a is None)
    if over:
        raise AdminError(
            f"the pause of group {group!r} ended ({format_ms(expiry)}) before any position was "
            f"written (coordination partition(s) {', '.join(map(str, over))}): no position was "
            "written; run the reset again, with a longer --pause-for if the log is slow"
        )


def _finish(result: Execution) -> Execution:
    """Log every record replay did not accept as expected."""
    for w in result.rejected:
        log.error(
            "record %d of %s/%d: %s",
            w.offset,
            COORDINATION_TOPIC,
            w.coord_partition,
            w.describe_verdict(),
        )
    return result


def _write(
    cluster: Cluster, cp: int, msg: Heartbeat | ReleaseGroup, clock: Clock
) -> tuple[int, int]:
    return _write_many(cluster, cp, [msg], clock)[0]


def _write_many(
    cluster: Cluster, cp: int, msgs: Sequence[Heartbeat | ReleaseGroup], clock: Clock
) -> list[tuple[int, int]]:
    """``msgs`` to coordination partition ``cp`` in one call: (offset, log time) of each."""
    now = round(clock.time() * 1000)
    records = [NewRecord(value=v, key=k, timestamp=now) for k, v in map(encode, msgs)]
    result = cluster.produce(COORDINATION_TOPIC, cp, records, durable=True)
    return [(offset, result.log_append_time) for offset in result.offsets]


def _release_everywhere(
    cluster: Cluster,
    n: int,
    group: str,
    admin: AdminIdentity,
    expiry: int,
    key: bytes | None,
    clock: Clock,
) -> list[WrittenRecord]:
    msg = ReleaseGroup(
        client_id=admin.client_id,
        instance_id=admin.instance_id,
        group_id=group,
        msg_expire_time=expiry,
    )
    if key:
        msg = sign(msg, key)
    out = []
    for cp in range(n):
        offset, stamp = _write(cluster, cp, msg, clock)
        out.append(WrittenRecord("release_group", cp, offset, stamp))
    return out


def _confirm(
    cluster: Cluster, written: list[WrittenRecord], admin_keys: AdminKeys | None
) -> list[WrittenRecord]:
    """Replay the log and attach to each written record the verdict replay gave it."""
    return _replay(cluster, written, admin_keys)[1]


def _replay(
    cluster: Cluster, written: list[WrittenRecord], admin_keys: AdminKeys | None
) -> tuple[CoordinationState, list[WrittenRecord]]:
    """Replay the log to its end (past every ``written`` record, whose produce returned):
    the world after them, and each with the verdict replay gave it."""
    wanted = {(w.coord_partition, w.offset) for w in written}
    verdicts: dict[tuple[int, int], Verdict | None] = {}

    def collect(rec: CoordRecord) -> None:
        k = (rec.coord_partition, rec.offset)
        if k in wanted:
            verdicts[k] = rec.verdict

    state = read_coordination(cluster, admin_keys=admin_keys, history=1, on_record=collect)
    for cp, offset in wanted - set(verdicts):
        # a member published a snapshot covering our record before we read: the replay
        # started after it, but the snapshot's world keeps recent verdicts (its window)
        if cp < state.n:
            verdicts[(cp, offset)] = state.worlds[cp].verdict(offset)
    return state, [
        attrs.evolve(w, verdict=verdicts.get((w.coord_partition, w.offset))) for w in written
    ]
