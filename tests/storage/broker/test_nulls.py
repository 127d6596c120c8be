"""A null where the schema forbids one gets INVALID_REQUEST in the API's answer, not a closed
connection; nothing of the request is applied, and the connection serves the next request.

Raw frames on a socket (kafka-python's classes write -1 for a None string or list, as a
broken client would) against a broker on 127.0.0.1 started by the ``broker`` fixture.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kafka.protocol.admin.configs import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from storage import DataDir
from storage.broker.errors import ErrorCode

from .helpers import RawClient, batch, fetch_request, produce_request

INVALID = ErrorCode.INVALID_REQUEST


def _codes(message: Any, version: int) -> list[int]:
    """Every error_code in a decoded response (of ``version``), at any depth."""
    out = []
    for name, field in getattr(message, "fields", {}).items():
        if not field.for_version_q(version):
            continue
        value = getattr(message, name, None)
        if name == "error_code":
            out.append(value)
        elif isinstance(value, list):
            for item in value:
                out.extend(_codes(item, version))
        elif hasattr(value, "fields"):
            out.extend(_codes(value, version))
    return out


def _serves_next(client: RawClient) -> None:
    """The same connection answers a well-formed request after the refusal."""
    response = client.call(MetadataRequest[1](topics=None), MetadataResponse)
    assert {t.name for t in response.topics} >= {"t", "lat"}


def _produce_with_null_topic(version: int) -> Any:
    request = produce_request("t", 0, batch(2), version=version)
    r = ProduceRequest[version]
    request.topic_data.append(
        r.TopicProduceData(
            name=None,
            partition_data=[r.TopicProduceData.PartitionProduceData(index=1, records=batch(1))],
        )
    )
    return request


def _fetch_with_null_topic(version: int) -> Any:
    request = fetch_request("t", 0, 0, version=version)
    request.topics[0].topic = None
    return request


def _list_offsets() -> Any:
    r = ListOffsetsRequest[5]
    return r(
        replica_id=-1,
        isolation_level=0,
        topics=[
            r.ListOffsetsTopic(
                name=None,
                partitions=[
                    r.ListOffsetsTopic.ListOffsetsPartition(
                        partition_index=0, current_leader_epoch=-1, timestamp=-1
                    )
                ],
            )
        ],
    )


def _create_topics() -> Any:
    r = CreateTopicsRequest[4]
    topic = r.CreatableTopic
    return r(
        topics=[
            topic(name="fresh", num_partitions=1, replication_factor=1, assignments=[], configs=[]),
            topic(
                name="other",
                num_partitions=1,
                replication_factor=1,
                assignments=[],
                configs=[topic.CreatableTopicConfig(name=None, value="1")],
            ),
        ],
        timeout_ms=1000,
        validate_only=False,
    )


def _delete_records() -> Any:
    r = DeleteRecordsRequest[1]
    t = r.DeleteRecordsTopic
    return r(
        topics=[
            t(name="t", partitions=[t.DeleteRecordsPartition(partition_index=0, offset=1)]),
            t(name=None, partitions=[t.DeleteRecordsPartition(partition_index=0, offset=1)]),
        ],
        timeout_ms=1000,
    )


def _alter(cls: Any, **config: Any) -> Any:
    r = cls
    res = r.AlterConfigsResource
    return r(
        resources=[
            res(
                resource_type=2,
                resource_name="t",
                configs=[res.AlterableConfig(name=None, value="1000", **config)],
            )
        ],
        validate_only=False,
    )


def _offset_commit() -> Any:
    r = OffsetCommitRequest[7]
    return r(
        group_id=None,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            r.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    r.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=1,
                        committed_leader_epoch=-1,
                        committed_metadata=None,
                    )
                ],
            )
        ],
    )


# name -> (request, response class, error codes every answer must carry at least)
CASES = {
    "Produce v8, a null topic name": (lambda: _produce_with_null_topic(8), ProduceResponse, 2),
    "Produce v3, a null topic name": (lambda: _produce_with_null_topic(3), ProduceResponse, 2),
    "Fetch v11, a null topic name": (lambda: _fetch_with_null_topic(11), FetchResponse, 2),
    "Fetch v4, a null topic name": (lambda: _fetch_with_null_topic(4), FetchResponse, 1),
    "ListOffsets v5, a null topic name": (_list_offsets, ListOffsetsResponse, 1),
    "Metadata v1, a null topic name": (
        lambda: MetadataRequest[1](topics=[MetadataRequest[1].MetadataRequestTopic(name=None)]),
        MetadataResponse,
        1,
    ),
    "OffsetCommit v7, a null group id": (_offset_commit, OffsetCommitResponse, 1),
    "OffsetFetch v5, a null group id": (
        lambda: OffsetFetchRequest[5](group_id=None, topics=None),
        OffsetFetchResponse,
        1,
    ),
    "FindCoordinator v2, a null key": (
        lambda: FindCoordinatorRequest[2](key=None, key_type=0),
        FindCoordinatorResponse,
        1,
    ),
    "JoinGroup v5, a null protocol type": (
        lambda: JoinGroupRequest[5](
            group_id="g",
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            member_id="",
            group_instance_id=None,
            protocol_type=None,
            protocols=[],
        ),
        JoinGroupResponse,
        1,
    ),
    "Heartbeat v3, a null member id": (
        lambda: HeartbeatRequest[3](
            group_id="g", generation_id=1, member_id=None, group_instance_id=None
        ),
        HeartbeatResponse,
        1,
    ),
    "LeaveGroup v3, a null group id": (
        lambda: LeaveGroupRequest[3](group_id=None, members=[]),
        LeaveGroupResponse,
        1,
    ),
    "SyncGroup v3, a null list of assignments": (
        lambda: SyncGroupRequest[3](
            group_id="g", generation_id=1, member_id="m", group_instance_id=None, assignments=None
        ),
        SyncGroupResponse,
        1,
    ),
    "DescribeGroups v4, a null group id": (
        lambda: DescribeGroupsRequest[4](groups=["g", None], include_authorized_operations=False),
        DescribeGroupsResponse,
        2,
    ),
    "CreateTopics v4, a null config name": (_create_topics, CreateTopicsResponse, 2),
    "DeleteTopics v3, a null topic name": (
        lambda: DeleteTopicsRequest[3](topic_names=["t", None], timeout_ms=1000),
        DeleteTopicsResponse,
        2,
    ),
    "DeleteRecords v1, a null topic name": (_delete_records, DeleteRecordsResponse, 2),
    "DescribeConfigs v3, a null resource name": (
        lambda: DescribeConfigsRequest[3](
            resources=[
                DescribeConfigsRequest[3].DescribeConfigsResource(
                    resource_type=2, resource_name=None, configuration_keys=None
                )
            ],
            include_synonyms=False,
            include_documentation=False,
        ),
        DescribeConfigsResponse,
        1,
    ),
    "AlterConfigs v1, a null config name": (
        lambda: _alter(AlterConfigsRequest[1]),
        AlterConfigsResponse,
        1,
    ),
    "IncrementalAlterConfigs v0, a null config name": (
        lambda: _alter(IncrementalAlterConfigsRequest[0], config_operation=0),
        IncrementalAlterConfigsResponse,
        1,
    ),
    "CreatePartitions v1, a null topic name": (
        lambda: CreatePartitionsRequest[1](
            topics=[
                CreatePartitionsRequest[1].CreatePartitionsTopic(
                    name=None, count=4, assignments=None
                )
            ],
            timeout_ms=1000,
            validate_only=False,
        ),
        CreatePartitionsResponse,
        1,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_forbidden_null_gets_invalid_request_and_the_connection_stays(
    name, broker, caplog
) -> None:
    build, response_cls, at_least = CASES[name]
    with (
        caplog.at_level(logging.WARNING, logger="storage.broker"),
        RawClient(broker.address) as client,
    ):
        request = build()
        response = client.call(request, response_cls)
        codes = _codes(response, request.API_VERSION)
        assert len(codes) >= at_least, codes
        assert set(codes) == {INVALID}, codes
        _serves_next(client)
        assert not client.is_closed_by_peer(0.2)
    assert "is null but not nullable; answered INVALID_REQUEST" in caplog.text
    assert "unexpected" not in caplog.text


def test_the_answer_names_what_was_asked_and_the_null_field(broker) -> None:
    with RawClient(broker.address) as client:
        created = client.call(_create_topics(), CreateTopicsResponse)
        assert [(t.name, t.error_code) for t in created.topics] == [
            ("fresh", INVALID),
            ("other", INVALID),
        ]
        assert created.topics[0].error_message == (
            "topics[1].configs[0].name is null but not nullable"
        )
        produced = client.call(_produce_with_null_topic(8), ProduceResponse)
        assert [(t.name, [p.index for p in t.partition_responses]) for t in produced.responses] == [
            ("t", [0]),
            ("", [1]),
        ]
        fetched = client.call(_fetch_with_null_topic(11), FetchResponse)
        assert fetched.error_code == INVALID
        assert fetched.responses[0].partitions[0].partition_index == 0


def test_nothing_of_a_refused_request_is_applied(broker) -> None:
    """Every entry of a refused request is refused, the well-formed ones too: all or nothing."""
    with RawClient(broker.address) as client:
        for name in (
            "Produce v8, a null topic name",
            "CreateTopics v4, a null config name",
            "DeleteTopics v3, a null topic name",
            "DeleteRecords v1, a null topic name",
            "AlterConfigs v1, a null config name",
        ):
            client.call(CASES[name][0](), CASES[name][1])
        # the one well-formed produce since start-up lands at offset 0
        response = client.call(produce_request("t", 0, batch(1)), ProduceResponse)
        part = response.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (0, 0)
    broker.__exit__(None, None, None)  # stop it to read its data directory
    with DataDir(broker.config.data_dir) as d:
        assert set(d.topics()) == {"t", "lat"}
        assert d.partition("t", 0).log_start_offset == 0
        assert d.partition("t", 0).log_end_offset == 1
        assert d.partition("t", 1).log_end_offset == 0
        assert d.describe("t").config.retention_ms != 1000


def test_a_null_list_the_answer_cannot_mirror_still_answers(broker) -> None:
    """Produce v8 with a null list of topics: an answer with no entries, never a close."""
    r = ProduceRequest[8]
    request = r(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=None)
    with RawClient(broker.address) as client:
        response = client.call(request, ProduceResponse)
        assert response.responses == []
        _serves_next(client)


def test_produce_with_acks_0_gets_no_answer_and_the_next_request_is_served(broker) -> None:
    request = _produce_with_null_topic(8)
    request.acks = 0
    with RawClient(broker.address) as client:
        client.send_raw(client.request_bytes(request))
        _serves_next(client)  # its answer is the next frame on the wire: nothing came before


def _own(client: RawClient, topic: str) -> dict[str, str]:
    r = DescribeConfigsRequest[1]
    answer = client.call(
        r(resources=[r.DescribeConfigsResource(2, topic, None)], include_synonyms=False),
        DescribeConfigsResponse,
    )
    return {c.name: c.value for c in answer.results[0].configs if c.config_source == 1}


def test_a_null_config_value_is_refused_as_kafka_refuses_it(broker) -> None:
    """A config value is nullable in the schema, and Kafka refuses a null one: CreateTopics
    with INVALID_CONFIG, the whole-set AlterConfigs with INVALID_REQUEST, nothing changed.
    Before, CreateTopics stored a replication-only setting as the text ``"None"`` (and a null
    ``min.insync.replicas`` was INVALID_PARTITIONS), and AlterConfigs dropped the null entry
    and replaced the whole set without it: a compact topic went back to delete."""
    create = CreateTopicsRequest[4]
    topic = create.CreatableTopic

    def created(name: str, configs: list[tuple[str, str | None]]) -> tuple[int, str]:
        request = create(
            topics=[
                topic(
                    name=name,
                    num_partitions=1,
                    replication_factor=1,
                    assignments=[],
                    configs=[topic.CreatableTopicConfig(name=k, value=v) for k, v in configs],
                )
            ],
            timeout_ms=1000,
            validate_only=False,
        )
        answer = client.call(request, CreateTopicsResponse).topics[0]
        return answer.error_code, answer.error_message

    alter = AlterConfigsRequest[1]
    with RawClient(broker.address) as client:
        for name in ("leader.replication.throttled.replicas", "min.insync.replicas", "segment.ms"):
            code, message = created("nulled", [(name, None)])
            assert code == ErrorCode.INVALID_CONFIG, (name, code, message)
            assert "null value" in message
        code, message = created("nulled", [("min.insync.replicas", "abc")])
        assert code == ErrorCode.INVALID_CONFIG, (code, message)
        own = {"cleanup.policy": "compact", "segment.ms": "60000", "retention.ms": "1000"}
        assert created("kept", list(own.items())) == (0, None)
        resource = alter.AlterConfigsResource
        request = alter(
            resources=[
                resource(
                    2,
                    "kept",
                    [
                        resource.AlterableConfig("retention.ms", "604800000"),
                        resource.AlterableConfig("segment.ms", None),
                    ],
                )
            ],
            validate_only=False,
        )
        answer = client.call(request, AlterConfigsResponse).responses[0]
        assert answer.error_code == INVALID, (answer.error_code, answer.error_message)
        assert _own(client, "kept") == own
        _serves_next(client)
    broker.__exit__(None, None, None)  # stop it to read its data directory
    with DataDir(broker.config.data_dir) as d:
        assert "nulled" not in d.topics()
        assert d.describe("kept").config.cleanup_policy == "compact"
