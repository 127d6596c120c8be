"""The broker's Prometheus endpoint: series move with the traffic of a small scenario."""

from __future__ import annotations

import urllib.request

from kafka.protocol.producer.produce import ProduceResponse
from prometheus_client.parser import text_string_to_metric_families

from storage import DataDir
from storage.broker import BrokerConfig, BrokerThread

from .helpers import RawClient, batch, fetch_request, produce_request


def scrape(address: tuple[str, int]) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_scrape_shows_requests_errors_bytes_latency_and_sizes(tmp_path):
    data = tmp_path / "d"
    with DataDir(data) as d:
        d.create_topic("t", 2)
    config = BrokerConfig(data_dir=data, port=0, metrics_port=0)
    with BrokerThread(config) as broker:
        address = broker.server.metrics_address
        before = scrape(address)
        assert (
            before[("logmarshal_broker_partition_size_bytes", (("partition", "0"), ("topic", "t")))]
            == 0
        )
        with RawClient(broker.address) as c:
            for _ in range(3):
                c.call(produce_request("t", 0, batch(5)), ProduceResponse)
            c.call(produce_request("nope", 0, batch(1)), ProduceResponse)
            from kafka.protocol.consumer.fetch import FetchResponse

            c.call(fetch_request("t", 0, 0), FetchResponse)
            c.call(fetch_request("t", 0, 999), FetchResponse)
        after = scrape(address)

    def v(name, **labels):
        return after.get((name, tuple(sorted(labels.items()))), 0.0)

    assert v("logmarshal_broker_requests_total", api="produce", error="NONE") == 3
    assert (
        v("logmarshal_broker_requests_total", api="produce", error="UNKNOWN_TOPIC_OR_PARTITION")
        == 1
    )
    assert v("logmarshal_broker_requests_total", api="fetch", error="NONE") == 1
    assert v("logmarshal_broker_requests_total", api="fetch", error="OFFSET_OUT_OF_RANGE") == 1
    assert v("logmarshal_broker_produce_latency_seconds_count") == 4
    assert v("logmarshal_broker_fetch_latency_seconds_count") == 2
    assert v("logmarshal_broker_request_bytes_total") > 3 * len(batch(5))
    assert v("logmarshal_broker_response_bytes_total") > 3 * len(batch(5))  # the fetch
    size = v("logmarshal_broker_partition_size_bytes", topic="t", partition="0")
    assert size >= 3 * len(batch(5))
    assert v("logmarshal_broker_log_end_offset", topic="t", partition="0") == 15
    assert v("logmarshal_broker_log_end_offset", topic="t", partition="1") == 0


def test_broker_start_metrics_port(tmp_path):
    from logmarshal.localbroker import LocalBroker

    from .helpers import free_port

    port = free_port()
    broker = LocalBroker(tmp_path, data_dir=tmp_path / "d", args=["--metrics-port", str(port)])
    with broker:
        assert broker.first_line().startswith("listening on")
        first = scrape(("127.0.0.1", port))
        with RawClient(broker.address) as c:
            c.call(produce_request("missing", 0, batch(1)), ProduceResponse)
        second = scrape(("127.0.0.1", port))
        key = (
            "logmarshal_broker_requests_total",
            (("api", "produce"), ("error", "UNKNOWN_TOPIC_OR_PARTITION")),
        )
        assert first.get(key, 0) == 0 and second[key] == 1


def test_a_partition_whose_fsync_failed_is_reported_offline(tmp_path, monkeypatch):
    """A partition whose fsync failed refuses appends until the broker restarts: a single
    node has no replica to take over, so it is an operator's to see. Its replica is reported
    offline in Metadata (as Kafka reports a replica on an offline log directory) and by ``logmarshal_broker_partition_offline``; reads and the other partitions go on.
    Before, nothing but each refused append's error said so."""
    import errno

    from kafka.protocol.consumer.fetch import FetchResponse
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from storage import _segment

    data = tmp_path / "d"
    with DataDir(data) as d:
        d.create_topic("t", 2)
    real = _segment.Segment.fsync

    def eio_on_t0(self) -> None:
        if self.log_path.parent.name == "t-0":
            raise OSError(errno.EIO, "Input/output error")
        real(self)

    config = BrokerConfig(data_dir=data, port=0, metrics_port=0)
    with BrokerThread(config) as broker:
        address = broker.server.metrics_address
        with RawClient(broker.address) as c:
            c.call(produce_request("t", 0, batch(2)), ProduceResponse)
            monkeypatch.setattr(_segment.Segment, "fsync", eio_on_t0)
            for p, expected in ((0, 56), (0, 56), (1, 0)):  # KAFKA_STORAGE_ERROR, then fine
                answer = c.call(produce_request("t", p, batch(1)), ProduceResponse)
                assert answer.responses[0].partition_responses[0].error_code == expected, p
            meta = c.call(
                MetadataRequest[8](
                    topics=[MetadataRequest[8].MetadataRequestTopic(name="t")],
                    allow_auto_topic_creation=False,
                    include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False,
                ),
                MetadataResponse,
            )
            offline = {
                part.partition_index: part.offline_replicas for part in meta.topics[0].partitions
            }
            node = meta.brokers[0].node_id
            assert offline == {0: [node], 1: []}
            fetched = c.call(fetch_request("t", 0, 0), FetchResponse)
            assert fetched.responses[0].partitions[0].error_code == 0  # reads go on
            assert fetched.responses[0].partitions[0].high_watermark == 2
        after = scrape(address)
    # the broker stopped without an error of its own: the partition's close said it was not
    # clean (the next start recovers it), every other partition was flushed and closed

    def v(partition: str) -> float:
        key = (("partition", partition), ("topic", "t"))
        return after[("logmarshal_broker_partition_offline", key)]

    assert (v("0"), v("1")) == (1, 0)
    monkeypatch.setattr(_segment.Segment, "fsync", real)
    with DataDir(data) as d:  # the restart's recovery: writable again, the rest kept
        assert d.unwritable("t") == ()
        # (the batch whose fsync failed reached the disk here, once; the next was refused)
        assert [d.partition("t", p).log_end_offset for p in (0, 1)] == [3, 1]
