"""A record's timestamp below 0 other than -1 (Kafka's NO_TIMESTAMP) is refused where a
record is made, as Kafka's producer refuses it ("Invalid negative timestamp"), never in the
middle of a batch of other records."""

from __future__ import annotations

import pytest

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.producer import Producer


def test_cluster_produce_refuses_a_record_made_with_a_negative_timestamp(tmp_path) -> None:
    with EmbeddedCluster(tmp_path / "d") as cluster:
        cluster.create_topic("t", 1)
        with pytest.raises(ValueError, match="timestamp -5 is negative"):
            cluster.produce("t", 0, [NewRecord(b"x", timestamp=-5)])
        cluster.produce("t", 0, [NewRecord(b"none", timestamp=-1)])  # NO_TIMESTAMP
        assert [(m.value, m.timestamp) for m in cluster.fetch("t", 0, 0)] == [(b"none", -1)]


@pytest.mark.parametrize("headers", [None, [("h", b"x")]])
def test_producer_send_refuses_a_negative_timestamp_and_its_batch_is_stored(
    tmp_path, headers
) -> None:
    with EmbeddedCluster(tmp_path / "d") as cluster, Producer(cluster) as producer:
        cluster.create_topic("t", 1)
        with pytest.raises(ValueError, match="timestamp -5"):
            producer.send("t", b"bad", partition=0, timestamp=-5, headers=headers)
        good = producer.send("t", b"good", partition=0, timestamp=10, headers=headers)
        producer.flush()
        assert good.result(5).offset == 0
