"""The coordination log: ``__marshal``, its snapshot topic, and how to read both.

The one home for everything that touches the coordination log's storage: the topic names
and configurations, creating and validating them, reading records (fast when the cluster
offers :class:`~logmarshal.cluster.ColumnFetcher`), and published snapshots: writing them,
finding the newest valid one, and truncating what every configuration's snapshots cover
(PROTOCOL.md, "Bounded coordination log"). The Marshaler, the admin and the audit all read
``__marshal`` through here.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping

import attrs

from rationalizer import PROTOCOL_VERSION, SnapshotError, WorldState
from rationalizer._codec import (
    T_ANNOUNCING_MEMBER,
    T_LEAVING_GROUP,
    T_RELEASE_GROUP,
    VERSION_6,
    DecodeError,
    envelope,
)
from rationalizer._snapshot_record import (
    PublishedSnapshot,
    config_fingerprint,
    encode_announcement,
    encode_snapshot_record,
    is_announcement_key,
    parse_announcement,
    parse_snapshot_record,
    restore_snapshot,
    snapshot_key,
)
from storage import CorruptBatch, NewRecord, TimestampType, TopicConfig
from storage._records import decode_columns_from

from ._ranges import read_below
from .cluster import Cluster, Columns, PastMarkers, RecordDeleter
from .errors import RETRIABLE, LogmarshalError, OffsetOutOfRange, TopicExists

__all__ = [
    "COORDINATION_TOPIC",
    "SNAPSHOT_TOPIC",
    "CoordinationTopicError",
    "Restored",
    "announce",
    "check_snapshot_topic",
    "configs_in_use",
    "coordination_topic_config",
    "coordination_topic_problems",
    "coordination_topic_settings",
    "ensure_coordination_topic",
    "ensure_snapshot_topic",
    "fetch_columns",
    "fetch_columns_many",
    "fetch_replay",
    "group_of_record",
    "iter_columns",
    "load_snapshot",
    "own_snapshots",
    "publish_snapshot",
    "read_snapshots",
    "records_from_cluster",
    "snapshot_topic_config",
    "snapshot_topic_problems",
    "truncate",
    "truncation_bounds",
]

log = logging.getLogger(__name__)

COORDINATION_TOPIC = "__marshal"
#: Published snapshots, partition ``cp`` holding those of ``__marshal`` partition ``cp``.
SNAPSHOT_TOPIC = "__marshal_snapshots"
_TIMESTAMP_TYPE = "message.timestamp.type"
_LOG_APPEND_TIME = "LogAppendTime"
_READ_BYTES = 8 << 20
#: snapshots kept per replay configuration: the newest, and one to fall back on
KEEP_SNAPSHOTS = 2
#: how long a Marshaler's announcement of its replay configuration holds (wall clock); it
#: is written again every quarter of it
DEFAULT_ANNOUNCE_TTL_MS = 600_000

Record = tuple[int, int, "bytes | None", "bytes | None"]


class CoordinationTopicError(LogmarshalError):
    """``__marshal`` exists but cannot be coordinated on (e.g. it uses CreateTime)."""


def coordination_topic_config() -> TopicConfig:
    """How the library creates ``__marshal``.

    LogAppendTime because decisions use the log's clock, never a client's; every message
    flushed because a claim that is acknowledged and then lost to a crash could let two
    consumers believe they own a partition; no time or size retention because positions of
    idle partitions live only in the log (truncation is DeleteRecords, bounded by published
    snapshots); 4 MiB segments so that the disk space truncation frees (whole segments, on
    Kafka and on our storage alike) follows the snapshots closely (about 60 k records a
    segment).
    """
    return TopicConfig(
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        flush_messages=1,
        retention_ms=-1,
        segment_bytes=4 << 20,
    )


def snapshot_topic_config() -> TopicConfig:
    """How the library creates ``__marshal_snapshots``: kept until truncated by the writers
    (never by time: an idle group's only snapshot must survive), small segments so truncation
    frees space soon, room for big worlds (a 2,000-partition world is a few hundred KiB)."""
    return TopicConfig(
        flush_messages=1,
        retention_ms=-1,
        segment_bytes=4 << 20,
        max_message_bytes=64 << 20,
    )


#: the settings ``__marshal`` is created with even where they equal Kafka's defaults: a
#: cluster's broker defaults (log.cleanup.policy, log.retention.bytes, ...) may differ, and
#: a topic created without them would take those
_PINNED = frozenset({_TIMESTAMP_TYPE, "cleanup.policy", "retention.ms", "retention.bytes"})


def coordination_topic_settings() -> dict[str, str]:
    """:func:`coordination_topic_config` as the Kafka-named settings sent to create
    ``__marshal``: those that differ from Kafka's defaults, and the protocol's own always."""
    wanted = coordination_topic_config().to_dict()
    defaults = TopicConfig().to_dict()
    return {k: v for k, v in wanted.items() if k in _PINNED or defaults.get(k) != v}


def coordination_topic_problems(config: Mapping[str, str]) -> list[str]:
    """What in a ``__marshal`` topic's configs breaks the protocol (empty: nothing).

    LogAppendTime, because decisions use the log's clock; no compaction and no time or size
    retention, because replay needs every record a snapshot does not cover (positions of
    idle partitions live only there): the log is bounded by truncation behind published
    snapshots, never by the broker. A setting the cluster does not report is not judged,
    except the timestamp type (Kafka's default is CreateTime)."""
    problems = []
    stamp = config.get(_TIMESTAMP_TYPE, "CreateTime")
    if stamp != _LOG_APPEND_TIME:
        problems.append(
            f"{_TIMESTAMP_TYPE}={stamp} (decisions need the log's own clock: {_LOG_APPEND_TIME})"
        )
    policy = config.get("cleanup.policy")
    if policy is not None and {p.strip() for p in policy.split(",")} != {"delete"}:
        problems.append(f"cleanup.policy={policy} (compaction drops records replay needs: delete)")
    for name in ("retention.ms", "retention.bytes"):
        value = config.get(name)
        if value is not None and value.strip() != "-1":
            problems.append(f"{name}={value} (the broker would drop unreplayed records: -1)")
    return problems


def ensure_coordination_topic(cluster: Cluster, wanted: int) -> int:
    """Create ``__marshal`` if missing; validate it otherwise (CoordinationTopicError, one
    line naming every setting to change). Returns its partition count."""
    if COORDINATION_TOPIC not in cluster.topics():
        try:
            cluster.create_topic(COORDINATION_TOPIC, wanted, coordination_topic_settings())
        except TopicExists:  # another process won the race; validate theirs
            pass
        else:
            log.info("created %s with %d partitions", COORDINATION_TOPIC, wanted)
            return wanted
    deadline = time.monotonic() + 30.0
    while True:
        try:
            description = cluster.describe_topic(COORDINATION_TOPIC)
            break
        except RETRIABLE:
            # listed, or just created by another process: Kafka's brokers learn a new
            # topic's metadata one by one, and this describe may ask one that has not yet
            # (an unknown topic, or a partition unknown to the broker asked for its offsets:
            # found on a 3-node Kafka, where a member died of it at start)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    problems = coordination_topic_problems(description.config)
    if problems:
        raise CoordinationTopicError(
            f"refusing to coordinate on {COORDINATION_TOPIC}: it has {'; '.join(problems)}; "
            "alter the topic's configs or recreate it"
        )
    if description.partitions != wanted:
        log.warning(
            "%s has %d partitions (asked for %d); using %d: the count is fixed once created",
            COORDINATION_TOPIC,
            description.partitions,
            wanted,
            description.partitions,
        )
    return description.partitions


def snapshot_topic_problems(config: Mapping[str, str]) -> list[str]:
    """What in a ``__marshal_snapshots`` topic's configs loses what the bounded log needs
    (empty: nothing). Compaction keeps one record per key (a configuration's newest
    snapshot: truncation needs two), and time or size retention can delete an idle group's
    only snapshots and the announcements of configurations in use. Neither breaks safety (a
    cold start without its snapshots refuses to act), but either can stop truncation or
    halt a cold start. A setting the cluster does not report is not judged."""
    problems = []
    policy = config.get("cleanup.policy")
    if policy is not None and {p.strip() for p in policy.split(",")} != {"delete"}:
        problems.append(f"cleanup.policy={policy} (keeps one snapshot per configuration: delete)")
    for name in ("retention.ms", "retention.bytes"):
        value = config.get(name)
        if value is not None and value.strip() != "-1":
            problems.append(f"{name}={value} (may delete snapshots still needed: -1)")
    return problems


def check_snapshot_topic(cluster: Cluster, partitions: int | None = None) -> list[str]:
    """Warn (one line) when an existing ``__marshal_snapshots`` is configured so that it can
    lose what the bounded log needs; returns the problems (empty if none or no topic). One
    with fewer than ``partitions`` (``__marshal``'s) is refused: the snapshots of
    ``__marshal/k`` are partition k's, and the replay of every coordination partition past
    its count retried for good, the group handing out nothing (CoordinationTopicError)."""
    try:
        if SNAPSHOT_TOPIC not in cluster.topics():
            return []
        description = cluster.describe_topic(SNAPSHOT_TOPIC)
        problems = snapshot_topic_problems(description.config)
    except RETRIABLE as exc:  # (a topic just created, a broker away): only a check is lost
        log.info("cannot check the configs of %s now: %s", SNAPSHOT_TOPIC, exc)
        return []
    if partitions is not None and description.partitions < partitions:
        raise CoordinationTopicError(
            f"refusing to coordinate: {SNAPSHOT_TOPIC} has {description.partitions} "
            f"partition(s), fewer than {COORDINATION_TOPIC}'s {partitions} (the snapshots of "
            f"{COORDINATION_TOPIC}/k are its partition k): add partitions to it, or delete it "
            "while no member runs (it is created with as many)"
        )
    if problems:
        log.warning("%s has %s; alter the topic's configs", SNAPSHOT_TOPIC, "; ".join(problems))
    return problems


def ensure_snapshot_topic(cluster: Cluster, partitions: int) -> None:
    """Create ``__marshal_snapshots`` with as many partitions as ``__marshal`` if missing."""
    if SNAPSHOT_TOPIC in cluster.topics():
        return
    try:
        cluster.create_topic(SNAPSHOT_TOPIC, partitions, snapshot_topic_config())
    except TopicExists:
        return
    log.info("created %s with %d partitions", SNAPSHOT_TOPIC, partitions)


# ------------------------------------------------------------------------------ reading


def fetch_columns(
    cluster: Cluster,
    topic: str,
    partition: int,
    offset: int,
    *,
    max_bytes: int = _READ_BYTES,
    max_wait: float = 0.0,
    skip_damaged: bool = True,
    on_skip: Callable[[CorruptBatch], None] | None = None,
) -> Columns:
    """Records from ``offset`` on as columns: from the stored batches when the cluster serves
    them (:class:`~logmarshal.cluster.BatchFetcher`), through its bulk read if it has one,
    else through ``fetch``.

    A stored batch that does not decode is skipped whole, as every replayer skips it
    (PROTOCOL.md): logged as an error, handed to ``on_skip``, and read past. With
    ``skip_damaged=False`` its :class:`~storage.CorruptBatch` is raised instead, for a
    caller that must move its own position past it (the Marshaler's replay, which counts it).

    An answer of transaction markers only is read past (:func:`fetch_replay` returns it).
    """
    while True:
        got = _fetch_chunk(
            cluster,
            topic,
            partition,
            offset,
            max_bytes=max_bytes,
            max_wait=max_wait,
            skip_damaged=skip_damaged,
            on_skip=on_skip,
        )
        if not isinstance(got, PastMarkers):
            return got
        offset = got.next_offset


def _fetch_chunk(
    cluster: Cluster,
    topic: str,
    partition: int,
    offset: int,
    *,
    max_bytes: int = _READ_BYTES,
    max_wait: float = 0.0,
    skip_damaged: bool = True,
    on_skip: Callable[[CorruptBatch], None] | None = None,
) -> Columns | PastMarkers:
    """One answer of :func:`fetch_columns`, where moving past offsets that hold no record
    (transaction markers only, or a damaged batch skipped) is :class:`PastMarkers` rather
    than the next read: a reader up to a log end read before tells that from an answer of
    nothing (``_ranges.read_below``; a marker at the end is not a record that never comes)."""
    try:
        return _fetch_columns_once(cluster, topic, partition, offset, max_bytes, max_wait)
    except CorruptBatch as exc:
        if not skip_damaged or exc.next_offset is None or exc.next_offset <= offset:
            raise
        log.error(
            "%s/%d: %s; skipped (its records are lost to every replayer)",
            topic,
            partition,
            exc,
            extra={"corrupt_batch": exc},
        )
        if on_skip is not None:
            on_skip(exc)
        return PastMarkers(exc.next_offset)


def _answered(got: Columns | PastMarkers) -> int:
    """How far an answer of :func:`_fetch_chunk` got: its records, or 1 for moving past
    offsets without records (``_ranges.read_below``'s count)."""
    return 1 if isinstance(got, PastMarkers) else len(got[0])


def fetch_replay(
    cluster: Cluster, partition: int, offset: int, *, max_bytes: int, max_wait: float
) -> Columns | PastMarkers:
    """One fetch of a replay of ``__marshal``: :func:`fetch_columns` with ``skip_damaged``
    off, and an answer of transaction markers only returned as :class:`PastMarkers`."""
    return _fetch_columns_once(cluster, COORDINATION_TOPIC, partition, offset, max_bytes, max_wait)


def _fetch_columns_once(
    cluster: Cluster, topic: str, partition: int, offset: int, max_bytes: int, max_wait: float
) -> Columns | PastMarkers:
    # the capabilities' test as a runtime-checkable protocol does it (the method is there and
    # not None), without typing's isinstance: this runs once per replay read, and that costs
    # tens of microseconds per protocol (an idle member reads 15 records a second)
    fetch_batches = getattr(cluster, "fetch_batches", None)
    if fetch_batches is not None:
        data = fetch_batches(topic, partition, offset, max_bytes=max_bytes, max_wait=max_wait)
        if isinstance(data, PastMarkers):
            return data
        if data is not None:
            return decode_columns_from(data, offset)
    fetch_columns = getattr(cluster, "fetch_columns", None)
    if fetch_columns is not None:
        return fetch_columns(topic, partition, offset, max_bytes=max_bytes, max_wait=max_wait)
    cols: Columns = ([], [], [], [])
    for m in cluster.fetch(topic, partition, offset, max_bytes=max_bytes, max_wait=max_wait):
        cols[0].append(m.offset)
        cols[1].append(m.timestamp)
        cols[2].append(m.key)
        cols[3].append(m.value)
    return cols


def fetch_columns_many(
    cluster: Cluster,
    topic: str,
    offsets: Mapping[int, int],
    *,
    max_bytes: int = _READ_BYTES,
    max_wait: float = 0.0,
) -> dict[int, Columns | Exception | PastMarkers] | None:
    """Records of several partitions of ``topic``, each from its offset on, fetched in one
    request (:class:`~logmarshal.cluster.MultiBatchFetcher`) and answered as soon as any has
    records: per partition, its columns or what it alone met (a
    :class:`~storage.CorruptBatch` that starts its answer, OffsetOutOfRange, ...), for the
    caller to handle as :func:`fetch_columns` with ``skip_damaged=False`` would have raised
    it, or :class:`PastMarkers`. A failure of the whole request is raised. None when the
    cluster cannot fetch them together: fetch each with :func:`fetch_columns` instead."""
    fetch_batches_many = getattr(cluster, "fetch_batches_many", None)  # (as above)
    if fetch_batches_many is None:
        return None
    got = fetch_batches_many(topic, offsets, max_bytes=max_bytes, max_wait=max_wait)
    if got is None:
        return None
    out: dict[int, Columns | Exception | PastMarkers] = {}
    for partition, data in got.items():
        if isinstance(data, (Exception, PastMarkers)):
            out[partition] = data
            continue
        if not data:  # nothing new: most of a replay's partitions, most of the time
            out[partition] = ([], [], [], [])
            continue
        try:
            out[partition] = decode_columns_from(data, offsets[partition])
        except CorruptBatch as exc:
            out[partition] = exc
    return out


def iter_columns(
    cluster: Cluster,
    partition: int,
    start: int,
    end: int,
    topic: str = COORDINATION_TOPIC,
    on_skip: Callable[[CorruptBatch], None] | None = None,
) -> Iterator[Columns]:
    """Chunks of the records ``start <= offset < end`` of one partition, in order; a stored
    batch that does not decode is skipped whole (and handed to ``on_skip``). An answer of
    nothing below ``end`` is waited for, then RetriableError (``_ranges.read_below``): it
    ended the chunks, and an admin or an audit judged part of the log."""
    offset = start
    while offset < end:
        cols = read_below(
            functools.partial(_chunk_from, cluster, topic, partition, offset, on_skip),
            f"{topic}/{partition}",
            offset,
            end,
            count=_answered,
        )
        if isinstance(cols, PastMarkers):
            offset = cols.next_offset
            continue
        nxt = cols[0][-1] + 1
        if nxt > end:
            keep = len(cols[0])
            while keep and cols[0][keep - 1] >= end:
                keep -= 1
            for c in cols:
                del c[keep:]
        if cols[0]:
            yield cols
        offset = nxt


def _chunk_from(
    cluster: Cluster,
    topic: str,
    partition: int,
    offset: int,
    on_skip: Callable[[CorruptBatch], None] | None,
    max_wait: float,
) -> Columns | PastMarkers:
    return _fetch_chunk(cluster, topic, partition, offset, max_wait=max_wait, on_skip=on_skip)


def records_from_cluster(
    cluster: Cluster, topic: str = COORDINATION_TOPIC, ends: dict[int, int] | None = None
) -> Iterator[tuple[int, list[Record]]]:
    """Each coordination partition's records read from the cluster (up to ``ends`` if given)."""
    for po in cluster.describe_topic(topic).offsets:
        end = po.latest if ends is None else ends.get(po.partition, po.latest)
        out: list[Record] = []
        for cols in iter_columns(cluster, po.partition, po.earliest, end, topic):
            out.extend(zip(*cols, strict=True))
        yield po.partition, out


#: record types keyed by their group alone (no other version gives these type bytes a
#: partition key)
_GROUP_KEYED = frozenset({T_RELEASE_GROUP, T_ANNOUNCING_MEMBER, T_LEAVING_GROUP})


def group_of_record(key: bytes | None, value: bytes | None) -> str | None:
    """The group a record claims to be about, from its key (valid records only matter).

    Keys are ``group/topic/partition`` (group ids may contain ``/``, topics cannot) or
    ``group`` for ReleaseGroup; the decoder checks the key against the value, so for every
    record that replay accepts this is exact. A record of version 6 or later says it in its
    envelope (a MemberHeartbeat's key is ``group``, under a heartbeat's type byte).
    """
    if key is None or value is None or len(value) < 2:
        return None
    if value[0] >= VERSION_6:  # the envelope names it (a MemberHeartbeat's key is the group)
        try:
            return envelope(value)[2]
        except DecodeError:
            return None
    try:
        if value[1] in _GROUP_KEYED:
            # ReleaseGroup and the membership records (versions 2 and 4) are keyed by the group
            return key.decode("utf-8")
        parts = key.rsplit(b"/", 2)
        return parts[0].decode("utf-8") if len(parts) == 3 else None
    except (UnicodeDecodeError, AttributeError, TypeError):
        return None


# ---------------------------------------------------------------------------- snapshots


@attrs.frozen
class Restored:
    """A world restored from a published snapshot (record ``offset`` of the snapshot topic)."""

    world: WorldState
    offset: int
    covered: int


#: reads of the snapshot records that truncation may overtake before one is given up
_SNAPSHOT_READS = 5


def read_snapshots(cluster: Cluster, cp: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """``(offset, key, value)`` of every snapshot record still stored for ``cp``."""
    if SNAPSHOT_TOPIC not in cluster.topics():
        return []
    for _ in range(_SNAPSHOT_READS):
        start = cluster.earliest_offset(SNAPSHOT_TOPIC, cp)
        end = cluster.latest_offset(SNAPSHOT_TOPIC, cp)
        out: list[tuple[int, bytes | None, bytes | None]] = []
        try:
            for cols in iter_columns(cluster, cp, start, end, SNAPSHOT_TOPIC):
                out.extend(zip(cols[0], cols[2], cols[3], strict=True))
        except OffsetOutOfRange:
            # a live member truncated the older snapshots under the read (seen in the
            # snapshots scenario's last check): what is still stored starts later now
            if cluster.earliest_offset(SNAPSHOT_TOPIC, cp) <= start:
                raise
            continue
        return out
    raise OffsetOutOfRange(start, cluster.earliest_offset(SNAPSHOT_TOPIC, cp), end)


def load_snapshot(
    cluster: Cluster | None,
    cp: int,
    admin_keys: Mapping[str, bytes] | None = None,
    *,
    earliest: int | None = None,
    snapshots: list[tuple[int, bytes | None, bytes | None]] | None = None,
) -> Restored | None:
    """The newest valid snapshot of ``cp`` for a replayer with ``admin_keys`` whose tail is
    still stored (``covered + 1 >= earliest`` of ``__marshal``), or None (replay the log).

    Each refused snapshot (digest, tag, decode, gap) is one warning; snapshots published
    under another replay configuration (other keyed groups, or other rules: another
    protocol version, or a record version 1 that does not say) are for other replayers and
    skipped silently, and so are announcements.
    ``cluster`` may be None when ``earliest`` and ``snapshots`` are given (the audit)."""
    keys = dict(admin_keys or {})
    mine = snapshot_key(cp, keys)
    if cluster is None and (earliest is None or snapshots is None):
        raise ValueError("without a cluster, give earliest and snapshots")
    if earliest is None:
        assert cluster is not None
        earliest = cluster.earliest_offset(COORDINATION_TOPIC, cp)
    if snapshots is None:
        assert cluster is not None
        snapshots = read_snapshots(cluster, cp)
    records = snapshots
    candidates: list[tuple[int, int, PublishedSnapshot]] = []
    for offset, key, value in records:
        if key != mine:
            continue
        try:
            snap = parse_snapshot_record(key, value)
        except SnapshotError as exc:
            log.warning("%s/%d@%d: ignoring snapshot: %s", SNAPSHOT_TOPIC, cp, offset, exc)
            continue
        candidates.append((snap.covered, offset, snap))
    for covered, offset, snap in sorted(candidates, key=lambda c: (c[0], c[1]), reverse=True):
        if covered + 1 < earliest:
            log.warning(
                "%s/%d@%d: ignoring snapshot covering %d: %s/%d starts at %d",
                SNAPSHOT_TOPIC,
                cp,
                offset,
                covered,
                COORDINATION_TOPIC,
                cp,
                earliest,
            )
            continue
        try:
            world = restore_snapshot(snap, cp, keys)
        except SnapshotError as exc:
            log.warning("%s/%d@%d: ignoring snapshot: %s", SNAPSHOT_TOPIC, cp, offset, exc)
            continue
        return Restored(world, offset, covered)
    return None


def publish_snapshot(
    cluster: Cluster,
    cp: int,
    world: WorldState,
    admin_keys: Mapping[str, bytes] | None = None,
    *,
    timestamp_ms: int = 0,
) -> int:
    """Write ``world`` (replayed with ``admin_keys``) as a snapshot of ``cp``; its offset.

    ``timestamp_ms`` is informational (the writer's clock): readers order snapshots by the
    offset they cover, never by time."""
    key, value = encode_snapshot_record(world, cp, admin_keys)
    record = NewRecord(value=value, key=key, timestamp=timestamp_ms)
    result = cluster.produce(SNAPSHOT_TOPIC, cp, [record], durable=True)
    log.info(
        "published a snapshot of %s/%d covering %d (%d bytes) at %s/%d@%d",
        COORDINATION_TOPIC,
        cp,
        world.applied_through,
        len(value),
        SNAPSHOT_TOPIC,
        cp,
        result.base_offset,
    )
    return result.base_offset


def _newest_valid(
    cp: int,
    found: list[tuple[int, int, PublishedSnapshot]],
    keys: Mapping[str, bytes] | None,
) -> list[tuple[int, int]]:
    """``(covered, offset)`` of the :data:`KEEP_SNAPSHOTS` newest valid snapshots among
    ``found`` (one configuration's), newest first. With ``keys`` (our own configuration) a
    snapshot counts only if it fully restores; without (another configuration's, whose keys
    we do not hold) if its digest matches. Checked only until KEEP_SNAPSHOTS pass: a full
    restore is the expensive part, and older snapshots do not move the bound."""
    valid: list[tuple[int, int]] = []
    for covered, offset, snap in sorted(found, key=lambda f: (f[0], f[1]), reverse=True):
        if keys is not None:
            try:
                restore_snapshot(snap, cp, keys)
            except SnapshotError:
                continue
        elif hashlib.sha256(snap.world).digest() != snap.digest:
            continue
        valid.append((covered, offset))
        if len(valid) == KEEP_SNAPSHOTS:
            break
    return valid


def _by_config(
    cp: int, snapshots: list[tuple[int, bytes | None, bytes | None]]
) -> tuple[dict[str, list[tuple[int, int, PublishedSnapshot]]], dict[str, int]]:
    """The snapshot records of ``cp`` by replay configuration, and per configuration the
    latest expiry (wall ms) its announcements carry."""
    by_config: dict[str, list[tuple[int, int, PublishedSnapshot]]] = {}
    announced: dict[str, int] = {}
    for offset, key, value in snapshots:
        if is_announcement_key(key):
            try:
                a = parse_announcement(key, value)
            except SnapshotError:
                continue
            if a.coord_partition == cp:
                announced[a.config] = max(announced.get(a.config, a.expires_ms), a.expires_ms)
            continue
        try:
            snap = parse_snapshot_record(key, value)
        except SnapshotError:
            continue
        if snap.coord_partition == cp:
            by_config.setdefault(snap.config, []).append((snap.covered, offset, snap))
    return by_config, announced


def configs_in_use(
    cp: int, snapshots: list[tuple[int, bytes | None, bytes | None]], now_ms: int
) -> set[str]:
    """The replay configurations of ``cp`` in use (PROTOCOL.md, "Bounded coordination
    log"): those with a snapshot record, and those with an announcement that has not
    expired at ``now_ms`` (the caller's wall clock)."""
    by_config, announced = _by_config(cp, snapshots)
    return set(by_config) | {c for c, until in announced.items() if until > now_ms}


def own_snapshots(
    cp: int,
    snapshots: list[tuple[int, bytes | None, bytes | None]],
    admin_keys: Mapping[str, bytes] | None = None,
) -> tuple[list[tuple[int, int]], int | None]:
    """``(covered, offset)`` of our own configuration's newest valid snapshots of ``cp``
    (at most :data:`KEEP_SNAPSHOTS`, newest first: what a cold start of ours can use and
    what bounds the truncation for us), and the highest offset another configuration's
    snapshot covers (None: there is none; not checked beyond parsing)."""
    keys = dict(admin_keys or {})
    mine = config_fingerprint(keys, PROTOCOL_VERSION)
    by_config, _ = _by_config(cp, snapshots)
    others = [c for config, found in by_config.items() if config != mine for c, _, _ in found]
    own = _newest_valid(cp, by_config.get(mine, []), keys)
    return own, max(others, default=None)


def truncation_bounds(
    cp: int,
    snapshots: list[tuple[int, bytes | None, bytes | None]],
    admin_keys: Mapping[str, bytes] | None = None,
    *,
    now_ms: int | None = None,
) -> tuple[int, int]:
    """``(marshal_before, snapshots_before)``: how far ``__marshal`` and the snapshot topic of
    ``cp`` may be truncated so that every replay configuration in use keeps its
    :data:`KEEP_SNAPSHOTS` newest snapshots and the tails they need. (0, 0) while any
    configuration in use has fewer (PROTOCOL.md, "Bounded coordination log").

    In use: every configuration (key configuration and rules) with a snapshot record, and
    every one announced with an expiry after ``now_ms`` (this process's wall clock, by
    default the system's). Our own configuration's snapshots count only if they fully
    verify; another configuration's (whose keys we do not hold) only if their digest
    matches.
    """
    keys = dict(admin_keys or {})
    mine = config_fingerprint(keys, PROTOCOL_VERSION)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    by_config, announced = _by_config(cp, snapshots)
    in_use = set(by_config) | {c for c, until in announced.items() if until > now}
    if not in_use:
        return 0, 0
    marshal_before = snapshots_before = None
    for config in sorted(in_use):
        valid = _newest_valid(cp, by_config.get(config, []), keys if config == mine else None)
        if len(valid) < KEEP_SNAPSHOTS:
            return 0, 0
        covered, offset = valid[-1]
        marshal_before = covered + 1 if marshal_before is None else min(marshal_before, covered + 1)
        snapshots_before = offset if snapshots_before is None else min(snapshots_before, offset)
    assert marshal_before is not None and snapshots_before is not None
    return marshal_before, snapshots_before


def announce(
    cluster: Cluster,
    cp: int,
    admin_keys: Mapping[str, bytes] | None = None,
    *,
    now_ms: int,
    ttl_ms: int = DEFAULT_ANNOUNCE_TTL_MS,
) -> int:
    """Announce that this process replays ``cp`` with ``admin_keys`` under this code's
    rules, until ``now_ms + ttl_ms`` (wall clock): a truncator then keeps what that
    configuration needs until it has snapshots of its own. Returns the record's offset."""
    key, value = encode_announcement(
        cp, sorted(dict(admin_keys or {})), written_ms=now_ms, expires_ms=now_ms + ttl_ms
    )
    record = NewRecord(value=value, key=key, timestamp=now_ms)
    result = cluster.produce(SNAPSHOT_TOPIC, cp, [record], durable=True)
    log.debug("announced %s at %s/%d@%d", key.decode(), SNAPSHOT_TOPIC, cp, result.base_offset)
    return result.base_offset


def truncate(
    cluster: Cluster,
    cp: int,
    admin_keys: Mapping[str, bytes] | None = None,
    *,
    now_ms: int | None = None,
) -> tuple[int, int] | None:
    """Delete what the kept snapshots of ``cp`` make unnecessary (both topics): nothing
    that a configuration in use still needs (:func:`truncation_bounds`, ``now_ms`` the
    wall clock announcements are judged by); returns the new earliest offsets
    ``(__marshal, snapshots)``, or None when the cluster cannot delete records (it has no
    :class:`~logmarshal.cluster.RecordDeleter`) or nothing may go."""
    if not isinstance(cluster, RecordDeleter):
        return None
    marshal_before, snapshots_before = truncation_bounds(
        cp, read_snapshots(cluster, cp), admin_keys, now_ms=now_ms
    )
    if marshal_before <= 0:
        return None
    m = cluster.delete_records(COORDINATION_TOPIC, {cp: marshal_before})[cp]
    s = cluster.delete_records(SNAPSHOT_TOPIC, {cp: snapshots_before})[cp]
    log.info(
        "truncated %s/%d before %d (now starts at %d) and %s/%d before %d (now %d)",
        COORDINATION_TOPIC,
        cp,
        marshal_before,
        m,
        SNAPSHOT_TOPIC,
        cp,
        snapshots_before,
        s,
    )
    return m, s
