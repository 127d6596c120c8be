"""Prometheus metrics of Marshalers and their Consumers, on a registry the application serves.

::

    metrics = logmarshal.MarshalerMetrics()
    marshaler = logmarshal.Marshaler(cluster, "worker-1", "billing", 5.0, metrics=metrics)
    prometheus_client.start_http_server(9100, registry=metrics.registry)   # the one line

Series (labels ``group`` and ``client_id`` name the Marshaler; one registry may watch many):

- ``logmarshal_marshaler_verdicts_total{outcome, reason, coordination_partition}``: records
  the replay applied, ``outcome`` accepted (``reason`` = the effect: claimed, renewed, ...)
  or rejected (``reason`` = still_owned, not_holder, fenced, ...). A Marshaler replays every
  group's records on its coordination partitions, so these count the whole partition;
- ``logmarshal_marshaler_replay_offset{coordination_partition}``: next offset to apply;
- ``logmarshal_marshaler_log_end_offset`` and ``logmarshal_marshaler_replay_lag``
  (log end minus replay offset), read from the cluster at scrape time;
- ``logmarshal_marshaler_claims_held``: partitions this client holds by the replay;
- ``logmarshal_marshaler_halts_total{coordination_partition, why}``: coordination partitions
  whose replay stopped being a fold of the log, ``why`` = ``rewound`` (the log went back
  below what the replay applied) or ``gap`` (records deleted before the replay saw them, no
  snapshot covering them); every group coordinated there stops acting there
  (docs/bounded-log.md, "A coordination log that loses records"). Alert on any increase.

A :class:`~logmarshal.Consumer` on such a Marshaler adds its own series (same labels):

- ``logmarshal_consumer_messages_total{topic, mode}``: messages handed out to the application;
- ``logmarshal_consumer_committed_total{topic}``: ALO messages committed;
- ``logmarshal_consumer_assignments_total{how}``: partitions taken: ``claimed`` (free),
  ``failover`` (from another member gone stale), ``recovered`` (our own claim found after a
  restart), ``took_back`` (restart takeover from our previous instance);
- ``logmarshal_consumer_revocations_total{why}``: partitions given up: ``released`` (close),
  ``gave_up`` (release-if-behind), ``lost`` (the replay shows another holder, or a rejected
  heartbeat), ``fenced`` (a newer instance of this client_id took over);
- ``logmarshal_consumer_claims_held``, and per held partition ``logmarshal_consumer_commit_lag``
  (handed out, not yet committed) and ``logmarshal_consumer_lag`` (log end minus the position
  heartbeats carry; read from the cluster at scrape time).

Nothing here is module-level state: each :class:`MarshalerMetrics` has its own registry
unless given one (pass ``prometheus_client.REGISTRY`` to add to the default one).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rationalizer import Verdict

__all__ = ["MarshalerMetrics", "WatchedConsumer", "WatchedMarshaler"]

log = logging.getLogger(__name__)


class WatchedMarshaler(Protocol):
    """What the series read of a :class:`~logmarshal.Marshaler` (it hands itself over with
    ``metrics=``): this module knows the Marshaler only by these."""

    @property
    def group_id(self) -> str: ...

    @property
    def client_id(self) -> str: ...

    @property
    def instance_id(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def replay_offsets(self) -> dict[int, int]: ...

    def log_end_offset(self, coord_partition: int) -> int: ...

    def claims(self, client_id: str | None = None) -> Iterable[Any]: ...


class WatchedConsumer(Protocol):
    """What the series read of a :class:`~logmarshal.Consumer` on a watched Marshaler."""

    @property
    def marshaler(self) -> WatchedMarshaler: ...

    @property
    def mode(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def claims(self) -> Sized: ...

    def uncommitted(self) -> Mapping[tuple[str, int], int]: ...

    def lag(self) -> Mapping[tuple[str, int], int]: ...

    def reader_renewals(self) -> int: ...


class _Gauges(Collector):
    def __init__(self, owner: MarshalerMetrics) -> None:
        self._owner = owner

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["group", "client_id", "coordination_partition"]
        offset = GaugeMetricFamily(
            "logmarshal_marshaler_replay_offset",
            "Next __marshal offset the replay applies",
            labels=labels,
        )
        end = GaugeMetricFamily(
            "logmarshal_marshaler_log_end_offset",
            "End of the coordination partition",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "logmarshal_marshaler_replay_lag",
            "Coordination records not replayed yet",
            labels=labels,
        )
        claims = GaugeMetricFamily(
            "logmarshal_marshaler_claims_held",
            "Partitions this client holds by the replay",
            labels=["group", "client_id"],
        )
        # one Marshaler a group and client: an instance that replaced one still open in this
        # process (a fenced one) is the one shown; two samples of one series are no series
        newest = {(m.group_id, m.client_id): m for m in self._owner.watched()}
        for marshaler in newest.values():
            who = [marshaler.group_id, marshaler.client_id]
            for cp, applied in sorted(marshaler.replay_offsets().items()):
                key = [*who, str(cp)]
                offset.add_metric(key, applied)
                try:
                    latest = marshaler.log_end_offset(cp)
                except Exception as exc:  # an unreachable log must not break the scrape
                    log.debug("no log end for coordination partition %d: %s", cp, exc)
                    continue
                end.add_metric(key, latest)
                lag.add_metric(key, max(0, latest - applied))
            mine = marshaler.instance_id  # (claims() counts every instance of the client)
            claims.add_metric(who, sum(c.instance_id == mine for c in marshaler.claims()))
        yield offset
        yield end
        yield lag
        yield claims
        yield from _consumer_gauges(self._owner.consumers(), self._owner.retired_renewals())


def _consumer_gauges(
    consumers: Iterable[WatchedConsumer], retired: Mapping[tuple[str, str], int]
) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """Per group and client: the sums over its consumers (the Consumers of one Marshaler
    read different topics; each gave a sample of its own under the same labels, which the
    text format does not allow and a server kept one of), renewals with those of the
    consumers closed (a counter never goes back); per partition: its one consumer's."""
    who = ["group", "client_id"]
    held = GaugeMetricFamily(
        "logmarshal_consumer_claims_held", "Partitions this consumer hands out", labels=who
    )
    labels = [*who, "topic", "partition"]
    pending = GaugeMetricFamily(
        "logmarshal_consumer_commit_lag",
        "Messages handed out and not committed yet (ALO)",
        labels=labels,
    )
    lag = GaugeMetricFamily(
        "logmarshal_consumer_lag",
        "Messages in the log after the position heartbeats carry",
        labels=labels,
    )
    renewals = CounterMetricFamily(
        "logmarshal_consumer_reader_renewals",
        "librdkafka consumers the fetch loop replaced: one stopped fetching a partition whose "
        "log had records for it (librdkafka#5153)",
        labels=who,
    )
    holding: Tally[tuple[str, str]] = Tally()
    renewed: Tally[tuple[str, str]] = Tally(retired)
    for consumer in consumers:
        marshaler = consumer.marshaler
        ids = [marshaler.group_id, marshaler.client_id]
        holding[marshaler.group_id, marshaler.client_id] += len(consumer.claims())
        renewed[marshaler.group_id, marshaler.client_id] += consumer.reader_renewals()
        for (topic, partition), n in consumer.uncommitted().items():
            pending.add_metric([*ids, topic, str(partition)], n)
        for (topic, partition), n in consumer.lag().items():
            lag.add_metric([*ids, topic, str(partition)], n)
    for (group, client), n in sorted(holding.items()):
        held.add_metric([group, client], n)
    for (group, client), n in sorted(renewed.items()):
        renewals.add_metric([group, client], n)
    yield held
    yield pending
    yield lag
    yield renewals


class MarshalerMetrics:
    """Series of the Marshalers given ``metrics=self``; serve ``self.registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._verdicts = Counter(
            "logmarshal_marshaler_verdicts",
            "Coordination records replayed, by outcome and reason (rejection) or effect",
            ["group", "client_id", "coordination_partition", "outcome", "reason"],
            registry=self.registry,
        )
        who = ["group", "client_id"]
        self._handed_out = Counter(
            "logmarshal_consumer_messages",
            "Messages handed out to the application",
            [*who, "topic", "mode"],
            registry=self.registry,
        )
        self._committed = Counter(
            "logmarshal_consumer_committed",
            "ALO messages committed by the application",
            [*who, "topic"],
            registry=self.registry,
        )
        self._assignments = Counter(
            "logmarshal_consumer_assignments",
            "Partitions a consumer took: claimed, failover, recovered, took_back",
            [*who, "how"],
            registry=self.registry,
        )
        self._revocations = Counter(
            "logmarshal_consumer_revocations",
            "Partitions a consumer stopped handing out: released, gave_up, lost, fenced",
            [*who, "why"],
            registry=self.registry,
        )
        self._halts = Counter(
            "logmarshal_marshaler_halts",
            "Coordination partitions whose replay stopped being a fold of the log "
            "(rewound: the log went back; gap: records deleted unseen): not acted on",
            [*who, "coordination_partition", "why"],
            registry=self.registry,
        )
        self._lock = threading.Lock()
        #: in the order watched (a dict's): the newest of one group and client is shown
        self._watched: weakref.WeakKeyDictionary[WatchedMarshaler, None] = (
            weakref.WeakKeyDictionary()
        )
        self._consumers: weakref.WeakSet[WatchedConsumer] = weakref.WeakSet()
        self._retired: Tally[tuple[str, str]] = Tally()
        self.registry.register(_Gauges(self))

    def watch(self, marshaler: WatchedMarshaler) -> None:
        with self._lock:
            self._watched[marshaler] = None

    def unwatch(self, marshaler: WatchedMarshaler) -> None:
        with self._lock:
            self._watched.pop(marshaler, None)

    def watched(self) -> list[WatchedMarshaler]:
        with self._lock:
            return [m for m in self._watched if not m.closed]

    def watch_consumer(self, consumer: WatchedConsumer) -> None:
        with self._lock:
            self._consumers.add(consumer)

    def unwatch_consumer(self, consumer: WatchedConsumer) -> None:
        with self._lock:
            if consumer in self._consumers:
                self._consumers.discard(consumer)
                m = consumer.marshaler
                self._retired[m.group_id, m.client_id] += consumer.reader_renewals()

    def retired_renewals(self) -> dict[tuple[str, str], int]:
        """The reader renewals of the consumers closed, per group and client."""
        with self._lock:
            return dict(self._retired)

    def consumers(self) -> list[WatchedConsumer]:
        with self._lock:
            return [c for c in self._consumers if not c.closed]

    # Consumer events: called once per batch or per claim change, never per message.

    def handed_out(self, consumer: WatchedConsumer, topic: str, count: int) -> None:
        m = consumer.marshaler
        self._handed_out.labels(m.group_id, m.client_id, topic, consumer.mode).inc(count)

    def committed(self, consumer: WatchedConsumer, topic: str, count: int) -> None:
        m = consumer.marshaler
        self._committed.labels(m.group_id, m.client_id, topic).inc(count)

    def assigned(self, consumer: WatchedConsumer, how: str) -> None:
        m = consumer.marshaler
        self._assignments.labels(m.group_id, m.client_id, how).inc()

    def revoked(self, consumer: WatchedConsumer, why: str) -> None:
        m = consumer.marshaler
        self._revocations.labels(m.group_id, m.client_id, why).inc()

    def halted(self, marshaler: WatchedMarshaler, coord_partition: int, why: str) -> None:
        """A coordination partition's replay halted (``rewound`` or ``gap``)."""
        self._halts.labels(marshaler.group_id, marshaler.client_id, str(coord_partition), why).inc()

    def count_verdicts(
        self, marshaler: WatchedMarshaler, coord_partition: int, verdicts: Iterable[Verdict | None]
    ) -> None:
        """Count one applied chunk (called by the replay thread; one inc per distinct label)."""
        tally: Tally[tuple[str, str]] = Tally()
        for v in verdicts:
            if v is None:
                continue
            if v.accepted:
                tally["accepted", v.effect.value if v.effect is not None else ""] += 1
            else:
                tally["rejected", v.reason.value if v.reason is not None else ""] += 1
        cp = str(coord_partition)
        for (outcome, reason), n in tally.items():
            self._verdicts.labels(marshaler.group_id, marshaler.client_id, cp, outcome, reason).inc(
                n
            )
