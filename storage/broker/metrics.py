"""Prometheus metrics of one broker, served by ``broker start --metrics-port``.

Every broker has its own :class:`prometheus_client.CollectorRegistry` (no module-level
state, so several brokers in one process, as in tests, never mix their series):

- ``logmarshal_broker_requests_total{api, error}``: requests answered, by API name and the
  first error code in the answer (``NONE`` when every part succeeded);
- ``logmarshal_broker_request_bytes_total`` / ``logmarshal_broker_response_bytes_total``;
- ``logmarshal_broker_produce_latency_seconds`` / ``logmarshal_broker_fetch_latency_seconds``:
  histograms of the time from a decoded request to its encoded answer (a fetch includes its
  long-poll wait, as Kafka's ``TotalTimeMs`` does);
- ``logmarshal_broker_partition_size_bytes``, ``..._log_start_offset``,
  ``..._log_end_offset`` per topic and partition, read from the data directory at scrape time;
- ``logmarshal_broker_partition_offline`` per topic and partition: 1 while it refuses appends
  after a failed fsync (Kafka's offline log directory), until the broker restarts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from storage._datadir import DataDir
from storage._errors import StorageError

from .errors import ErrorCode
from .wire import ApiKey

__all__ = ["BrokerMetrics", "first_error"]

log = logging.getLogger(__name__)

_API_NAMES = {value: name.lower() for name, value in vars(ApiKey).items() if isinstance(value, int)}
# Produce with acks=all waits for an fsync (ms); a fetch may long-poll up to max_wait (s).
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def first_error(response: Any, _depth: int = 0) -> int:
    """The first non-zero ``error_code`` in a response object (0 if none); walks the tree."""
    code = getattr(response, "error_code", 0)
    if code:
        return int(code)
    if _depth > 4:
        return 0
    fields = getattr(response, "fields", None)
    if not fields:
        return 0
    for name in fields:
        value = getattr(response, name, None)
        if isinstance(value, list):
            for item in value:
                found = first_error(item, _depth + 1)
                if found:
                    return found
    return 0


class _Partitions(Collector):
    def __init__(self, data_dir: DataDir) -> None:
        self._dir = data_dir

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(
            "logmarshal_broker_partition_size_bytes", "Bytes stored per partition", labels=labels
        )
        start = GaugeMetricFamily(
            "logmarshal_broker_log_start_offset", "First offset still stored", labels=labels
        )
        end = GaugeMetricFamily(
            "logmarshal_broker_log_end_offset", "Next offset to be written", labels=labels
        )
        offline = GaugeMetricFamily(
            "logmarshal_broker_partition_offline",
            "1 while the partition refuses appends after a failed fsync (until a restart)",
            labels=labels,
        )
        try:
            names = self._dir.topics()
        except StorageError:
            names = []
        for name in names:
            try:
                count = self._dir.describe(name).partitions
                for p in range(count):
                    plog = self._dir.partition(name, p)
                    key = [name, str(p)]
                    size.add_metric(key, plog.size_bytes)
                    start.add_metric(key, plog.log_start_offset)
                    end.add_metric(key, plog.log_end_offset)
                    offline.add_metric(key, 0 if plog.unwritable is None else 1)
            except StorageError:
                continue  # deleted while scraping
        yield size
        yield start
        yield end
        yield offline


class BrokerMetrics:
    """The broker's series on its own registry; ``serve`` exposes them over HTTP."""

    def __init__(self, data_dir: DataDir | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "logmarshal_broker_requests",
            "Requests answered, by API and first error code",
            ["api", "error"],
            registry=r,
        )
        self.bytes_in = Counter(
            "logmarshal_broker_request_bytes", "Bytes of request frames received", registry=r
        )
        self.bytes_out = Counter(
            "logmarshal_broker_response_bytes", "Bytes of response frames sent", registry=r
        )
        self.produce_latency = Histogram(
            "logmarshal_broker_produce_latency_seconds",
            "Produce: request decoded to answer",
            buckets=_BUCKETS,
            registry=r,
        )
        self.fetch_latency = Histogram(
            "logmarshal_broker_fetch_latency_seconds",
            "Fetch: request decoded to answer, long-poll wait included",
            buckets=_BUCKETS,
            registry=r,
        )
        if data_dir is not None:
            r.register(_Partitions(data_dir))
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def observe(
        self, api_key: int, error: int, seconds: float, bytes_in: int, bytes_out: int
    ) -> None:
        """Count one answered request (called on the broker's loop; cheap)."""
        self.requests.labels(_API_NAMES.get(api_key, str(api_key)), _error_name(error)).inc()
        self.bytes_in.inc(bytes_in)
        self.bytes_out.inc(bytes_out)
        if api_key == ApiKey.PRODUCE:
            self.produce_latency.observe(seconds)
        elif api_key == ApiKey.FETCH:
            self.fetch_latency.observe(seconds)

    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Serve ``/metrics`` on host:port (0 picks a port) in a daemon thread."""
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        bound = self._server.server_address
        log.info("metrics on http://%s:%d/metrics", bound[0], bound[1])
        return bound[0], bound[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
