"""A real broker process trims a quiet topic on its retention check (docs/broker.md, retention)."""

from __future__ import annotations

import time

from kafka.protocol.admin.topics import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer.produce import ProduceResponse

from logmarshal.localbroker import LocalBroker

from .helpers import RawClient, batch, produce_request


def _offsets(client: RawClient, topic: str) -> tuple[int, int]:
    r = ListOffsetsRequest[5]

    def ask(ts: int) -> int:
        request = r(
            replica_id=-1,
            isolation_level=0,
            topics=[
                r.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        r.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=ts
                        )
                    ],
                )
            ],
        )
        part = client.call(request, ListOffsetsResponse).topics[0].partitions[0]
        assert part.error_code == 0
        return part.offset

    return ask(-2), ask(-1)


def test_quiet_topic_is_trimmed_by_the_periodic_check(tmp_path) -> None:
    broker = LocalBroker(
        tmp_path, data_dir=tmp_path / "d", args=["--retention-check-interval-ms", "1000"]
    )
    with broker:
        assert broker.first_line().startswith("listening on")
        with RawClient(broker.address) as client:
            r = CreateTopicsRequest[4]
            created = client.call(
                r(
                    topics=[
                        r.CreatableTopic(
                            name="quiet",
                            num_partitions=1,
                            replication_factor=1,
                            assignments=[],
                            configs=[
                                r.CreatableTopic.CreatableTopicConfig(
                                    name="retention.ms", value="3000"
                                )
                            ],
                        )
                    ],
                    timeout_ms=5000,
                    validate_only=False,
                ),
                CreateTopicsResponse,
            )
            assert created.topics[0].error_code == 0
            for start in range(0, 1000, 100):
                answer = client.call(
                    produce_request("quiet", 0, batch(100, start=start)), ProduceResponse
                )
                assert answer.responses[0].partition_responses[0].error_code == 0
            assert _offsets(client, "quiet") == (0, 1000)
            # positive condition, polled with a deadline: the check runs every second and
            # the records expire 3 s after they were written
            deadline = time.monotonic() + 30
            while _offsets(client, "quiet")[0] != 1000 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _offsets(client, "quiet") == (1000, 1000)
