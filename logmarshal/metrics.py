"""Prometheus metrics of Marshalers, on a registry the application serves.

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
- ``logmarshal_marshaler_claims_held``: partitions this client holds by the replay.

Nothing here is module-level state: each :class:`MarshalerMetrics` has its own registry
unless given one (pass ``prometheus_client.REGISTRY`` to add to the default one).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from rationalizer import Verdict

    from .marshaler import Marshaler

__all__ = ["MarshalerMetrics"]

log = logging.getLogger(__name__)


class _Gauges(Collector):
    def __init__(self, owner: MarshalerMetrics) -> None:
        self._owner = owner

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["group", "client_id", "coordination_partition"]
        offset = GaugeMetricFamily(
            "logmarshal_marshaler_replay_offset", "Next __marshal offset the replay applies",
            labels=labels,
        )
        end = GaugeMetricFamily(
            "logmarshal_marshaler_log_end_offset", "End of the coordination partition",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "logmarshal_marshaler_replay_lag", "Coordination records not replayed yet",
            labels=labels,
        )
        claims = GaugeMetricFamily(
            "logmarshal_marshaler_claims_held", "Partitions this client holds by the replay",
            labels=["group", "client_id"],
        )
        for marshaler in self._owner.watched():
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
            claims.add_metric(who, len(marshaler.claims(marshaler.client_id)))
        yield offset
        yield end
        yield lag
        yield claims


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
        self._lock = threading.Lock()
        self._watched: weakref.WeakSet[Marshaler] = weakref.WeakSet()
        self.registry.register(_Gauges(self))

    def watch(self, marshaler: Marshaler) -> None:
        with self._lock:
            self._watched.add(marshaler)

    def unwatch(self, marshaler: Marshaler) -> None:
        with self._lock:
            self._watched.discard(marshaler)

    def watched(self) -> list[Marshaler]:
        with self._lock:
            return [m for m in self._watched if not m.closed]

    def count_verdicts(
        self, marshaler: Marshaler, coord_partition: int, verdicts: Iterable[Verdict | None]
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
            self._verdicts.labels(
                marshaler.group_id, marshaler.client_id, cp, outcome, reason
            ).inc(n)
