"""The Marshaler: one process's window onto a group's coordination log.

It replays every ``__marshal`` partition into its own :class:`rationalizer.WorldState`
(a :class:`~logmarshal._tailer.Tailer`, long-polling the log: one wait for every partition
over the network and embedded, else a thread each),
writes this process's coordination records durably, and answers queries from what the
replay has applied. A client learns whether a record won by waiting until the replay has
reached the offset its write returned (read-your-writes) and reading that offset's verdict.
Consumers attach to it (:meth:`Marshaler.attach`) and build their claims, heartbeats and
fencing on top of it; writing single messages by hand is :mod:`logmarshal._direct`.

Decisions come only from the replay. The injected clock is for predictions (is a partition
likely claimable yet?), so a wrong clock costs at most a rejected claim, never a double
owner.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import random
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, TypedDict, Unpack

import attrs

from rationalizer import Claim, PartitionState, Verdict, WorldState, coordination_partition
from rationalizer._codec import T_ANNOUNCING_MEMBER, T_HEARTBEAT, T_HEARTBEATING_TASK
from storage import NewRecord

from ._config import configure
from ._coordlog import (
    COORDINATION_TOPIC,
    DEFAULT_ANNOUNCE_TTL_MS,
    CoordinationTopicError,
    check_snapshot_topic,
    coordination_topic_config,
    ensure_coordination_topic,
)
from ._member_args import check_marshaler_settings, check_member_args
from ._seconds import seconds
from ._tailer import Halt, Tailer
from .clock import SYSTEM_CLOCK, Clock
from .cluster import FETCH_MAX_BYTES, Cluster, FetchWaker, MultiBatchFetcher, ProduceResult
from .errors import ClosedError
from .metrics import MarshalerMetrics

__all__ = [
    "COORDINATION_TOPIC",
    "DEFAULT_ANNOUNCE_TTL",
    "DEFAULT_SNAPSHOT_INTERVAL",
    "DEFAULT_SNAPSHOT_RECORDS",
    "AttachedConsumer",
    "CoordinationTopicError",
    "Landed",
    "Marshaler",
    "coordination_topic_config",
]

log = logging.getLogger(__name__)

#: record types written on a timer whose verdicts nobody waits for: the replay may linger
#: on them (every other record of ours makes it hurry: a claim's verdict is awaited)
_ROUTINE = frozenset({T_HEARTBEAT, T_ANNOUNCING_MEMBER, T_HEARTBEATING_TASK})
#: the replay's default linger is HB over this: at HB 1 s, 100 ms (32 member processes over
#: one broker on 2 cores balanced a join in 1 s with it, and not within 4 s at 20 ms)
LINGER_PER_HB = 10

#: Publish a snapshot of a coordination partition every this many records (the writer of
#: each multiple of it does). A cold start replays on average half of it per coordination
#: partition (bench/coldstart.py: 25,000 keeps a 2,000-partition group's cold start well
#: under a second); the writer pays one dump (~30 ms for such a world) per point.
DEFAULT_SNAPSHOT_RECORDS = 25_000
#: ... and at least every this many seconds of log time while records arrive.
DEFAULT_SNAPSHOT_INTERVAL = 3600.0
#: How long (seconds, wall clock) an announcement of this Marshaler's replay configuration
#: keeps truncators from deleting what the configuration needs; renewed every quarter of it.
DEFAULT_ANNOUNCE_TTL = DEFAULT_ANNOUNCE_TTL_MS / 1000


@attrs.frozen
class Landed:
    """Where a coordination record landed: the offset whose verdict decides it."""

    coordination_partition: int
    offset: int


class AttachedConsumer(Protocol):
    """What a Marshaler knows of a consumer attached to it (:meth:`Marshaler.attach`): the
    topics it consumes, so that no two consumers of one Marshaler share (and fight over) a
    claim, and ``close``, which the Marshaler's own close calls first, so the consumer's
    claims are released while the replay still runs. :class:`logmarshal.Consumer` is one."""

    @property
    def topics(self) -> tuple[str, ...]: ...

    def close(self) -> None: ...


class MarshalerConfig(TypedDict, total=False):
    """The types of :attr:`Marshaler.DEFAULT_CONFIG`'s settings (and of the old names in
    ``RENAMED``), for a type checker; tests hold the two lists equal."""

    clock: Clock
    coordination_partitions: int
    rng: random.Random | None
    fetch_wait: float
    max_partition_fetch_bytes: int
    fetch_linger: float | None
    admin_keys: Mapping[str, bytes] | None
    metrics: MarshalerMetrics | None
    snapshot_records: int | None
    snapshot_interval: float | None
    truncate: bool
    restore_snapshots: bool
    announce_ttl: float
    fetch_max_bytes: int  # deprecated: max_partition_fetch_bytes


class Marshaler:
    """Replays ``__marshal`` for ``group_id`` and writes this client's coordination messages.

    ``heartbeat_interval`` (seconds, at most one hour) is this member's HB, its lease: it is
    written into every claim and heartbeat, and every replayer judges a holder's freshness
    with the holder's own HB, so members may use different values. The Marshaler owns it:
    it is converted to whole milliseconds here, once (:attr:`heartbeat_interval_ms`).
    The other settings are keywords, kafka-python style: :attr:`DEFAULT_CONFIG` lists every
    one with its default and what it means (an unknown name is refused, naming the known
    ones). The instance id is random per Marshaler (per process start) and drawn from
    ``rng``, so a restart of the same ``client_id`` is told apart from the instance it
    replaces.

    Bounded log (PROTOCOL.md, "Bounded coordination log"): a cold start restores each
    partition's newest valid published snapshot and replays only the tail; this marshaler
    publishes a snapshot when its own record lands on a snapshot point and then, if
    ``truncate``, deletes what the two newest snapshots of every replay configuration in use
    cover. Every Marshaler announces its replay configuration (admin keys and protocol
    version) in the snapshot topic for every coordination partition, before its cold start
    reads the log and then every ``announce_ttl``/4 seconds: a configuration announced
    without two valid snapshots holds every truncation at nothing, and a publishing
    Marshaler (one with a snapshot point) whose configuration lacks them, or whose newest
    lags by ``snapshot_records``, publishes one once caught up and again every snapshot
    interval. ``_announce=False`` removes the announcements (only the tests that show what
    they prevent use it).

    A coordination log that loses records (docs/bounded-log.md, "A coordination log that
    loses records"): when the log goes back below what the replay of a coordination
    partition applied, or records were deleted before the replay saw them and no valid
    snapshot of this configuration covers them, that partition is halted (:meth:`halts`,
    one error line, the ``logmarshal_marshaler_halts_total`` metric) and the consumers stop
    acting on every partition coordinated there. ``_check_rewind=False`` removes the check
    for a log that went back (only the test that shows what it prevents uses it).
    """

    #: every setting but the four above, name -> default: the only list of them
    DEFAULT_CONFIG: ClassVar[Mapping[str, Any]] = MappingProxyType(
        {
            # the injected clock: predictions only (is a partition likely claimable yet?)
            "clock": SYSTEM_CLOCK,
            # partitions of ``__marshal`` when this Marshaler creates it (an existing topic's
            # count is used, with a warning if it differs; a CoreOptions setting)
            "coordination_partitions": 8,
            # where the instance id comes from (None: ``random.SystemRandom()``)
            "rng": None,
            # seconds: the bound of each long poll of the replay, answered as soon as records
            # come, so it costs no latency: it sets the idle cost (while idle, a request every
            # this much: one for every partition over the network, one per partition elsewhere)
            # and how long :meth:`close` may take. Kafka's fetch.max.wait.ms default; longer than
            # the Consumer's 0.2 s, which is latency where it is used (a reader that polls)
            "fetch_wait": 0.5,
            # the most bytes one fetch returns of one coordination partition (Kafka's
            # max.partition.fetch.bytes)
            "max_partition_fetch_bytes": FETCH_MAX_BYTES,
            # seconds (0 turns it off; None: over the network HB/10, at most ``fetch_wait``, and
            # 0 on the embedded cluster): how long the replay lets pass after an answer that
            # carried records before it asks again, so that the appends of that time come in
            # one answer: without it every member's replay is answered once per append to
            # ``__marshal``, M answers an append from the broker (docs/performance.md, the M²
            # term). Others' records are seen up to that much later; a claim or release of our
            # own (and any record :meth:`wait_applied` waits for) is fetched without it, and so
            # is a backlog
            "fetch_linger": None,
            # group id -> key bytes (read from a file by the caller): the replay rejects
            # unauthenticated admin records of those groups; every member and the audit must
            # be given the same keys (PROTOCOL.md)
            "admin_keys": None,
            # Prometheus series (:mod:`logmarshal.metrics`), or None
            "metrics": None,
            # publish a snapshot every this many records of a coordination partition (the
            # writer of each multiple of it does); None: never by count
            "snapshot_records": DEFAULT_SNAPSHOT_RECORDS,
            # seconds: ... and at the first record of each this much log time; None: never by time
            "snapshot_interval": DEFAULT_SNAPSHOT_INTERVAL,
            # after publishing, delete what the two newest snapshots of every configuration in
            # use cover
            "truncate": True,
            # a cold start restores the newest valid snapshot and replays only the tail
            "restore_snapshots": True,
            # seconds, wall clock, at least 4 ms: how long an announcement of this Marshaler's
            # replay configuration keeps truncators from deleting what it needs
            "announce_ttl": DEFAULT_ANNOUNCE_TTL,
        }
    )
    #: old name -> the setting's name: taken with a DeprecationWarning
    RENAMED: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            # Kafka's fetch.max.bytes bounds a whole fetch request; this bounds one partition's
            "fetch_max_bytes": "max_partition_fetch_bytes",
        }
    )

    def __init__(
        self,
        cluster: Cluster,
        client_id: str,
        group_id: str,
        heartbeat_interval: float,
        *,
        _check_rewind: bool = True,
        _announce: bool = True,
        **configs: Unpack[MarshalerConfig],
    ) -> None:
        config = configure(type(self).__name__, self.DEFAULT_CONFIG, configs, self.RENAMED)
        clock: Clock = config["clock"]
        coordination_partitions: int = config["coordination_partitions"]
        rng: random.Random | None = config["rng"]
        fetch_wait: float = config["fetch_wait"]
        fetch_linger: float | None = config["fetch_linger"]
        metrics: MarshalerMetrics | None = config["metrics"]
        snapshot_records: int | None = config["snapshot_records"]
        snapshot_interval: float | None = config["snapshot_interval"]
        announce_ttl: float = config["announce_ttl"]
        check_member_args(cluster, client_id, group_id, heartbeat_interval)
        check_marshaler_settings(config)
        hb_ms = round(heartbeat_interval * 1000)
        if isinstance(coordination_partitions, bool) or not isinstance(
            coordination_partitions, int
        ):
            raise TypeError(
                f"coordination_partitions must be an int, got {coordination_partitions!r}"
            )
        if coordination_partitions < 1:
            raise ValueError(
                f"coordination_partitions must be at least 1, got {coordination_partitions}"
            )
        # nan and inf passed a check of the sign alone: the replay never advanced (fetch_wait)
        # or stopped for good at its first chunk (fetch_linger, a time_t overflow)
        seconds("fetch_wait", fetch_wait, above=0)
        if fetch_linger is None:
            # over the network only: there one answer per member per append is what the
            # broker pays for (docs/performance.md, "32 x 256 as processes, shown"); the
            # embedded replay reads the process's own log, and a linger there only makes
            # a member see others' records later (an admin's pause, for one: a holder polled
            # right after it still hands out the window it reserved before it, as the
            # protocol allows until its replay shows the pause)
            # (a long poll this process can end at will, a FetchWaker's, waits on a log in
            # this process: the embedded cluster, or a wrapper of it)
            networked = isinstance(cluster, MultiBatchFetcher) and not isinstance(
                cluster, FetchWaker
            )
            fetch_linger = min(heartbeat_interval / LINGER_PER_HB, fetch_wait) if networked else 0.0
        seconds("fetch_linger", fetch_linger, at_least=0)
        if snapshot_interval is not None:
            seconds("snapshot_interval", snapshot_interval, above=0)
        seconds("announce_ttl", announce_ttl, at_least=0.004)
        if metrics is not None and not isinstance(metrics, MarshalerMetrics):
            # (checked here: it failed after the replay thread started, which then ran on)
            raise TypeError(f"metrics must be a logmarshal.metrics object or None, got {metrics!r}")
        self._cluster = cluster
        # the cluster's own (its class's), never one a wrapper forwards through __getattr__:
        # a wrapper that intercepts produce must see every coordination write
        self._produce_many: Callable[..., dict[int, ProduceResult | Exception]] | None = (
            cluster.produce_many  # type: ignore[attr-defined]  # a MultiProducer: checked just below
            if inspect.getattr_static(cluster, "produce_many", None) is not None
            else None
        )
        self._produce_async: Callable[..., None] | None = (
            cluster.produce_async  # type: ignore[attr-defined]  # an AsyncProducer: checked just below
            if inspect.getattr_static(cluster, "produce_async", None) is not None
            else None
        )
        self._client_id = client_id
        self._group_id = group_id
        self._hb_ms = hb_ms
        self._clock = clock
        self._rng = rng if rng is not None else random.SystemRandom()
        self._instance_id = f"{self._rng.getrandbits(64):016x}"
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._consumers: list[AttachedConsumer] = []
        #: the names each consumer reserved or attached with (the topics it names or its
        #: pattern matches as they grow, its tasks and their sources): one consumer a name
        #: (:meth:`reserve`, :meth:`take_topics`)
        self._reading: dict[AttachedConsumer, frozenset[str]] = {}
        self._closing = False  # close() began: no consumer attaches any more
        self._listeners: tuple[Callable[[int, int], None], ...] = ()
        self._batch_listeners: tuple[Callable[[list[tuple[int, int]]], None], ...] = ()
        self._halt_listeners: tuple[Callable[[Halt], None], ...] = ()
        #: coordination partitions this instance wrote to, and the gaps found in them after
        #: (kept: the instance stops for good, whichever of its consumers wrote; :meth:`lost`)
        self._wrote: set[int] = set()
        self._lost: set[Halt] = set()
        self._metrics = metrics  # Prometheus series (logmarshal.metrics), or None
        self._n = ensure_coordination_topic(cluster, coordination_partitions)
        check_snapshot_topic(cluster, self._n)  # configs: a warning; too few partitions: no
        self._tailer = Tailer(
            cluster,
            self._n,
            admin_keys=config["admin_keys"],
            applied=self._applied,
            applied_many=self._applied_many,
            now_ms=self.now_ms,
            thread_name=f"logmarshal-tail:{group_id}:{client_id}",
            fetch_wait=fetch_wait,
            max_partition_fetch_bytes=config["max_partition_fetch_bytes"],
            fetch_linger=fetch_linger,
            snapshot_records=snapshot_records,
            snapshot_ms=None if snapshot_interval is None else round(snapshot_interval * 1000),
            truncate=config["truncate"],
            restore=config["restore_snapshots"],
            halted=self._on_halt,
            announce_ttl_ms=round(announce_ttl * 1000) if _announce else None,
            _check_rewind=_check_rewind,
        )
        self._tailer.start()
        if metrics is not None:
            metrics.watch(self)
        log.info(
            "marshaler %s/%s (instance %s) replaying %d coordination partitions, HB %.3f s",
            group_id,
            client_id,
            self._instance_id,
            self._n,
            self.heartbeat_interval,
        )

    # -- identity ---------------------------------------------------------------------------

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    @property
    def client_id(self) -> str:
        return self._client_id

    @property
    def instance_id(self) -> str:
        return self._instance_id

    @property
    def group_id(self) -> str:
        return self._group_id

    @property
    def identity(self) -> tuple[str, str]:
        """``(client_id, instance_id)``, the form WorldState reports holders in."""
        return (self._client_id, self._instance_id)

    @property
    def heartbeat_interval_ms(self) -> int:
        """This member's HB in whole milliseconds, as its records carry it."""
        return self._hb_ms

    @property
    def heartbeat_interval(self) -> float:
        """HB in seconds (:attr:`heartbeat_interval_ms` / 1000)."""
        return self._hb_ms / 1000.0

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def coordination_partitions(self) -> int:
        return self._n

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def now_ms(self) -> int:
        """This client's *estimate* of log time, for predictions only."""
        return round(self._clock.time() * 1000)

    # -- the coordination topic -------------------------------------------------------------

    def coordination_partition(self, topic: str, partition: int) -> int:
        return coordination_partition(topic, partition, self._n)

    # -- replay -----------------------------------------------------------------------------

    def wait_applied(self, coord_partition: int, offset: int, timeout: float) -> bool:
        """Wait until the replay of ``coord_partition`` has applied ``offset``.

        False on timeout, after :meth:`close`, or if that partition's replay stopped.
        """
        return self._tailer.wait_applied(coord_partition, offset, timeout)

    def wait_caught_up(self, timeout: float) -> bool:
        """Wait until every partition is replayed up to its end as of this call."""
        return self._tailer.wait_caught_up(timeout)

    def log_ends(self) -> dict[int, int]:
        """The end of every coordination partition still replayed, as the log shows it now
        (a look-up each), for :meth:`wait_reached`."""
        return self._tailer.log_ends()

    def wait_reached(self, ends: Mapping[int, int], timeout: float) -> bool:
        """Wait until the replay has reached ``ends`` (:meth:`log_ends`): what
        :meth:`wait_caught_up` does, in as many tries as the caller likes, towards the
        same ends."""
        return self._tailer.wait_reached(ends, timeout)

    def _applied(self, cp: int, applied: int, verdicts: list[Verdict | None]) -> None:
        """From the tail thread of ``cp``, after each applied chunk (outside its lock)."""
        self._applied_many([(cp, applied, verdicts)])

    def _applied_many(self, chunks: list[tuple[int, int, list[Verdict | None]]]) -> None:
        """From the replay thread, after the chunks one answer brought for several
        partitions are all applied (outside their locks)."""
        for listener in self._listeners:
            for cp, applied, _ in chunks:
                try:
                    listener(cp, applied)
                except Exception:
                    log.exception("a replay listener failed")
        if self._batch_listeners:
            reached = [(cp, applied) for cp, applied, _ in chunks]
            for many in self._batch_listeners:
                try:
                    many(reached)
                except Exception:
                    log.exception("a replay listener failed")
        if self._metrics is not None:
            for cp, _, verdicts in chunks:
                self._metrics.count_verdicts(self, cp, verdicts)

    def _on_halt(self, halt: Halt) -> None:
        """From a replay thread: a coordination partition halted (the tailer logged it)."""
        if halt.why == "gap":
            with self._lock:
                live = halt.cp in self._wrote
                if live:
                    self._lost.add(halt)
            if live:
                log.error(
                    "instance %s of %s lost records of %s/%d after it wrote there: a newer "
                    "instance of its client_id may have taken its claims over in them, so its "
                    "consumers stop as fenced ones do; restart them (a new instance)",
                    self._instance_id,
                    self._client_id,
                    COORDINATION_TOPIC,
                    halt.cp,
                )
        if self._metrics is not None:
            self._metrics.halted(self, halt.cp, halt.why)
        for listener in self._halt_listeners:
            try:
                listener(halt)
            except Exception:
                log.exception("a halt listener failed")

    def halts(self) -> dict[int, Halt]:
        """Coordination partitions whose replay is not a fold of the log (rewound or a gap),
        by partition: nothing coordinated there may be acted on (:mod:`logmarshal.core.rewind`)."""
        return self._tailer.halts()

    def lost(self) -> frozenset[Halt]:
        """Gaps found in a coordination partition after this instance wrote there (kept
        after the partition resumed): what they deleted may have fenced it, so every consumer
        of this Marshaler stops, those built later too (PROTOCOL.md, "A coordination log that
        loses records"). A gap where it never wrote deleted no takeover of its claims."""
        with self._lock:
            return frozenset(self._lost)

    def regained(self, coord_partition: int) -> frozenset[tuple[str, int]]:
        """After a gap: the partitions of our group the log determines again there (an admin
        reset seen since, its pause over: :class:`logmarshal.core.Regained`)."""
        return self.regained_after(coord_partition)[1]

    def regained_after(self, coord_partition: int) -> tuple[int, frozenset[tuple[str, int]]]:
        """:meth:`regained`, with the offset the gap it answers ended at (``Halt.after``;
        -1: no gap there), read together."""
        return self._tailer.regained(coord_partition, self._group_id)

    def add_halt_listener(self, listener: Callable[[Halt], None]) -> None:
        """Call ``listener(halt)`` from the replay thread when a coordination partition halts
        (:meth:`halts` has it already when the listener is added later)."""
        with self._lock:
            self._halt_listeners = (*self._halt_listeners, listener)

    def remove_halt_listener(self, listener: Callable[[Halt], None]) -> None:
        with self._lock:
            self._halt_listeners = tuple(x for x in self._halt_listeners if x is not listener)

    # -- writes -----------------------------------------------------------------------------

    def write_records(self, cp: int, records: Sequence[tuple[bytes, bytes]]) -> list[Landed]:
        """Write encoded ``(key, value)`` coordination records durably to partition ``cp``, in
        order, in one call (one flush): a consumer core's Write actions, which encoded the
        messages themselves (an AMO reservation and the heartbeat right behind it)."""
        if self._closed.is_set():
            raise ClosedError("the marshaler is closed")
        self._writing((cp,))
        now = self.now_ms()
        sent_at = self._tailer.replayed_to(cp)  # a record landing below it: the log went back
        result = self._cluster.produce(
            COORDINATION_TOPIC, cp, _new_records(records, now), durable=True
        )
        return self._landed(cp, result.offsets, records, sent_at)

    @property
    def writes_together(self) -> bool:
        """Can one thread write to every coordination partition? Where the cluster's class
        writes several partitions in one call (:class:`~logmarshal.cluster.MultiProducer`:
        the embedded one, one directory in this process, whose partitions are never away
        apart). Over the network a partition whose broker is down must hold up only its own
        writes: a thread each."""
        return self._produce_many is not None

    @property
    def writes_async(self) -> bool:
        """Can one thread write to every coordination partition without waiting for the
        answers? Where the cluster's class offers it (:class:`~logmarshal.cluster.AsyncProducer`:
        the network one: a partition whose broker is away holds up only its own answers),
        and this class writes through :meth:`write_records` as it is (a subclass that
        overrides it means to see every write)."""
        return (
            self._produce_async is not None and type(self).write_records is Marshaler.write_records
        )

    def write_records_async(
        self,
        batches: Mapping[int, Sequence[tuple[bytes, bytes]]],
        done: Callable[[Callable[[], dict[int, list[Landed] | Exception]]], None],
    ) -> None:
        """:meth:`write_records` of several partitions' records without waiting. ``done`` is
        called from a thread of the cluster's (it must not block) for the partitions
        answered together, until each was answered once (a partition that does not exist at
        once, from this call), with a function to call once, on the writer's own thread,
        before anyone acts on the answer: it says where each one's records landed (or what
        it met), after the replay's checks of our writes that may read the log back (a
        write the log acknowledged and then lost, :meth:`write_records`). Only where
        :attr:`writes_async`."""
        if self._closed.is_set():
            raise ClosedError("the marshaler is closed")
        produce_async = self._produce_async
        if produce_async is None:
            raise TypeError(f"{self._cluster!r} does not write without waiting")
        missing = self._missing(batches)
        batches = {cp: records for cp, records in batches.items() if cp not in missing}
        self._writing(batches)
        now = self.now_ms()
        sent_at = {cp: self._tailer.replayed_to(cp) for cp in batches}

        def landed(results: dict[int, ProduceResult | Exception]) -> None:
            def finish() -> dict[int, list[Landed] | Exception]:
                out: dict[int, list[Landed] | Exception] = {}
                for cp, result in results.items():
                    try:
                        out[cp] = (
                            result
                            if isinstance(result, Exception)
                            else self._landed(cp, result.offsets, batches[cp], sent_at[cp])
                        )
                    except Exception as exc:  # (never leave a write unanswered)
                        out[cp] = exc
                return out

            done(finish)

        if batches:
            produce_async(
                COORDINATION_TOPIC,
                {cp: _new_records(records, now) for cp, records in batches.items()},
                landed,
            )
        if missing:  # (after the others were handed over: a call that raises answers none)
            done(lambda: dict(missing))

    def _writing(self, cps: Iterable[int]) -> None:
        """Note the partitions written to before the write goes out (:meth:`lost`)."""
        cps = set(cps) - self._wrote
        if cps:
            with self._lock:
                self._wrote |= cps

    def _missing(self, cps: Iterable[int]) -> dict[int, Exception]:
        """The error of each of ``cps`` that is no coordination partition."""
        return {
            cp: ValueError(f"no coordination partition {cp} (there are {self._n})")
            for cp in cps
            if not 0 <= cp < self._n
        }

    def write_records_many(
        self, batches: Mapping[int, Sequence[tuple[bytes, bytes]]]
    ) -> dict[int, list[Landed] | Exception]:
        """:meth:`write_records` of several partitions' records; per partition, where they
        landed or what its write alone met. One call where the cluster can
        (:class:`~logmarshal.cluster.MultiProducer`: the replay then hears of them all in one
        answer), else a call per partition."""
        if self._closed.is_set():
            raise ClosedError("the marshaler is closed")
        produce_many = self._produce_many
        out: dict[int, list[Landed] | Exception] = {}
        if produce_many is None:
            for cp, records in batches.items():
                try:
                    out[cp] = self.write_records(cp, records)
                except ClosedError:
                    raise
                except Exception as exc:
                    out[cp] = exc
            return out
        out.update(self._missing(batches))
        self._writing(cp for cp in batches if cp not in out)
        now = self.now_ms()
        sent_at = {cp: self._tailer.replayed_to(cp) for cp in batches if cp not in out}
        results = produce_many(
            COORDINATION_TOPIC,
            {cp: _new_records(records, now) for cp, records in batches.items() if cp not in out},
            durable=True,
        )
        for cp, result in results.items():
            out[cp] = (
                result
                if isinstance(result, Exception)
                else self._landed(cp, result.offsets, batches[cp], sent_at[cp])
            )
        return out

    def _landed(
        self, cp: int, offsets: Sequence[int], records: Sequence[tuple[bytes, bytes]], sent_at: int
    ) -> list[Landed]:
        """What the replay is told of our records written to ``cp`` at ``offsets``."""
        self._tailer.mark_own(cp, offsets)
        self._tailer.mark_written(cp, offsets, records, sent_at)
        if any(len(value) < 2 or value[1] not in _ROUTINE for _, value in records):
            # a claim or a release: its verdict is awaited, the replay skips its linger
            self._tailer.hurry(cp)
        return [Landed(cp, offset) for offset in offsets]

    # -- queries (as of what each partition's replay has applied) ---------------------------

    def _world(self, topic: str, partition: int) -> contextlib.AbstractContextManager[WorldState]:
        return self._tailer.world(self.coordination_partition(topic, partition))

    def holder(self, topic: str, partition: int) -> tuple[str, str] | None:
        with self._world(topic, partition) as world:
            return world.holder(self._group_id, topic, partition)

    def is_holder(self, topic: str, partition: int) -> bool:
        """True if the replay says this very instance holds the partition."""
        return self.holder(topic, partition) == self.identity

    def freshness(self, topic: str, partition: int, now_ms: int | None = None) -> str | None:
        now = self.now_ms() if now_ms is None else now_ms
        with self._world(topic, partition) as world:
            return world.freshness(self._group_id, topic, partition, now)

    def claimable(self, topic: str, partition: int, now_ms: int | None = None) -> bool:
        """Prediction: would a claim written now be accepted (given nothing else before it)?"""
        now = self.now_ms() if now_ms is None else now_ms
        with self._world(topic, partition) as world:
            return world.claimable(self._group_id, topic, partition, now)

    def resume_offset(self, topic: str, partition: int) -> int | None:
        """``max(last_offset, claimed_through) + 1``; None while no accepted record set a position."""
        with self._world(topic, partition) as world:
            return world.resume_offset(self._group_id, topic, partition)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        with self._world(topic, partition) as world:
            return world.partition_state(self._group_id, topic, partition)

    def claims(self, client_id: str | None = None) -> list[Claim]:
        """Partitions of the group held by any instance of ``client_id`` (default: ours)."""
        client = self._client_id if client_id is None else client_id
        out: list[Claim] = []
        for cp in range(self._n):
            with self._tailer.world(cp) as world:
                out.extend(world.claims_of(self._group_id, client))
        return sorted(out, key=lambda c: (c.topic, c.partition))

    def partitions(self) -> list[PartitionState]:
        """Every partition of the group the coordination log mentions."""
        out: list[PartitionState] = []
        for cp in range(self._n):
            with self._tailer.world(cp) as world:
                out.extend(world.partitions(self._group_id))
        return sorted(out, key=lambda s: (s.topic, s.partition))

    @property
    def skipped_batches(self) -> int:
        """Corrupt stored coordination batches the replay skipped (each logged as an error)."""
        return self._tailer.skipped_batches

    def paused_until(self) -> int | None:
        """End (log ms) of the group's pause, latest over the partitions that have seen it."""
        ends = []
        for cp in range(self._n):
            with self._tailer.world(cp) as world:
                end = world.paused_until(self._group_id)
            if end is not None:
                ends.append(end)
        return max(ends) if ends else None

    def is_fenced(self) -> bool:
        """True if some replay has fenced this instance (a newer one of our client took
        over), or may have in records lost after it wrote there (:meth:`lost`)."""
        if self.lost():
            return True
        for cp in range(self._n):
            with self._tailer.world(cp) as world:
                if world.is_fenced(self._client_id, self._instance_id):
                    return True
        return False

    # -- consumers and lifetime -------------------------------------------------------------

    def worlds(self) -> Sequence[WorldState]:
        """The replayed worlds, one per coordination partition, for a consumer core to read
        while it holds :meth:`replay_paused` (a tail thread may otherwise be applying)."""
        return self._tailer.worlds()

    def replay_locks(self) -> Sequence[threading.Condition]:
        """The replay's locks, one per coordination partition: holding all of them (in this
        order) holds every replay still, so a consumer core can read the worlds."""
        return self._tailer.locks()

    @contextlib.contextmanager
    def replay_paused(self) -> Iterator[None]:
        """Hold every partition's replay still (their locks, in partition order)."""
        locks = self.replay_locks()
        for lock in locks:
            lock.acquire()
        try:
            yield
        finally:
            for lock in reversed(locks):
                lock.release()

    def add_listener(self, listener: Callable[[int, int], None]) -> None:
        """Call ``listener(cp, applied_through)`` from the replay thread after each batch of
        coordination partition ``cp`` is applied (outside the replay's lock)."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

    def remove_listener(self, listener: Callable[[int, int], None]) -> None:
        with self._lock:
            self._listeners = tuple(x for x in self._listeners if x is not listener)

    def add_batch_listener(self, listener: Callable[[list[tuple[int, int]]], None]) -> None:
        """Call ``listener([(cp, applied_through), ...])`` from the replay thread after chunks
        are applied: those of several partitions at once when one answer brought them (the
        network replay), else one. For a listener that decides once per call (a
        Consumer's core steps them together)."""
        with self._lock:
            self._batch_listeners = (*self._batch_listeners, listener)

    def remove_batch_listener(self, listener: Callable[[list[tuple[int, int]]], None]) -> None:
        with self._lock:
            self._batch_listeners = tuple(x for x in self._batch_listeners if x is not listener)

    def reserve(
        self, consumer: AttachedConsumer, names: Iterable[str], matched: Iterable[str] = ()
    ) -> tuple[str, ...]:
        """Reserve for ``consumer`` the ``names`` it claims or reads (the topics it names, its
        tasks, whose names are its claims' keys, and their sources: one namespace) and those
        of ``matched`` (its pattern's matches) no other consumer of this Marshaler has;
        returns the latter. One consumer per name per Marshaler: two would write as one
        instance, each taking the other's claims and reservations for its own (AMO: offsets
        handed out twice), so a name another consumer has is refused with ValueError.
        Atomic with :meth:`take_topics` and :meth:`attach`: a name is never given to two."""
        with self._lock:
            self._refuse_closed()
            return self._reserve(consumer, set(names), matched)

    def _reserve(
        self, consumer: AttachedConsumer, wanted: set[str], matched: Iterable[str]
    ) -> tuple[str, ...]:
        """Under the lock: :meth:`reserve`."""
        taken = self._taken(consumer)
        overlap = wanted & taken
        if overlap:
            raise ValueError(
                f"this marshaler already has a consumer of {sorted(overlap)}; "
                "use another Marshaler (client_id) for a second consumer"
            )
        free = tuple(t for t in matched if t not in taken and t not in wanted)
        self._reading[consumer] = frozenset(wanted).union(free)
        return free

    def _taken(self, consumer: AttachedConsumer) -> frozenset[str]:
        """Under the lock: every name another consumer than ``consumer`` has."""
        return frozenset().union(*(r for c, r in self._reading.items() if c is not consumer))

    def _refuse_closed(self) -> None:
        """Under the lock: no consumer attaches once :meth:`close` began (it would outlive
        the replay it reads)."""
        if self._closing or self._closed.is_set():
            raise ClosedError("the marshaler is closed")

    def attach(self, consumer: AttachedConsumer, topics: Iterable[str]) -> None:
        """Attach ``consumer``, which reads ``topics``: this Marshaler closes it first when it
        closes. A consumer that reserved (:meth:`reserve`: a Consumer does, before it starts
        anything, and attaches once it runs) keeps what it reserved; else ``topics`` are
        reserved now, refused as there."""
        with self._lock:
            self._refuse_closed()
            if consumer not in self._reading:
                self._reserve(consumer, set(topics), ())
            self._consumers.append(consumer)

    def take_topics(
        self, consumer: AttachedConsumer, matched: Iterable[str], own: Iterable[str] = ()
    ) -> tuple[str, ...]:
        """Of the topics a pattern of ``consumer`` matches now, those no other consumer of
        this Marshaler has and that are none of ``own`` (its tasks and their sources); they,
        with ``own``, are what it has from now on. A pattern grows into topics created after
        it reserved, which :meth:`reserve` never saw. Atomic, so two patterns never both
        take one new topic: the first to look takes it."""
        with self._lock:
            if consumer in self._reading:  # (its own names are its: never refused here)
                return self._reserve(consumer, set(own), matched)
            taken = self._taken(consumer).union(own)  # (closed meanwhile: nothing kept)
            return tuple(t for t in matched if t not in taken)

    def detach(self, consumer: AttachedConsumer) -> None:
        """Forget ``consumer`` (it closed itself); its topics are free for another one."""
        with self._lock:
            if consumer in self._consumers:
                self._consumers.remove(consumer)
            self._reading.pop(consumer, None)

    @property
    def metrics(self) -> MarshalerMetrics | None:
        """The Prometheus series this Marshaler (and its Consumers) report to, if any."""
        return self._metrics

    def replay_offsets(self) -> dict[int, int]:
        """Per coordination partition, the next offset the replay will apply (for metrics)."""
        return self._tailer.next_offsets()

    def log_end_offset(self, coord_partition: int) -> int:
        """The coordination partition's end now (the replay lags it by the difference)."""
        return self._cluster.latest_offset(COORDINATION_TOPIC, coord_partition)

    def close(self, timeout: float | None = None) -> None:
        """Close this marshaler's consumers (releasing their claims), then stop replaying."""
        with self._lock:
            self._closing = True
            consumers = list(self._consumers)
        for consumer in consumers:
            consumer.close()
        if self._closed.is_set():
            return
        self._closed.set()
        if self._metrics is not None:
            self._metrics.unwatch(self)
        self._tailer.stop(timeout)
        log.info("marshaler %s/%s closed", self._group_id, self._client_id)

    def __enter__(self) -> Marshaler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Marshaler(group={self._group_id!r}, client={self._client_id!r}, "
            f"instance={self._instance_id!r})"
        )


def _new_records(records: Sequence[tuple[bytes, bytes]], now: int) -> list[NewRecord]:
    """Encoded ``(key, value)`` coordination records as records to produce, stamped ``now``."""
    return [NewRecord(value=value, key=key, timestamp=now) for key, value in records]
