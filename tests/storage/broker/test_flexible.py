"""The flexible versions (KIP-482: compact strings and arrays, tagged fields, request header
v2 and response header v1) the broker serves for Kafka's Java tools: ListOffsets 6-7
(MAX_TIMESTAMP) and ListGroups 3-5 (states and types). Kafka's own tools on them are
tests/storage/broker/test_java_tools.py; here the bytes, without a JVM."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin.groups import ListGroupsRequest, ListGroupsResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceResponse

from storage import DataDir
from storage.broker import BrokerConfig, BrokerThread
from storage.broker.errors import ErrorCode
from storage.broker.groups import GroupMember, GroupSnapshot
from tests.storage.broker.helpers import RawClient, batch, produce_request

MAX_TIMESTAMP = -3


def _list_offsets(version: int, ts: int, name: str | None = "t") -> Any:
    r = ListOffsetsRequest[version]
    return r(replica_id=-1, isolation_level=0, topics=[r.ListOffsetsTopic(
        name=name, partitions=[r.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=ts)])])  # fmt: skip


def test_list_offsets_v6_v7_and_max_timestamp(broker) -> None:
    with RawClient(broker.address) as client:

        def ask(version: int, ts: int) -> tuple[int, int, int]:
            answer = client.call(_list_offsets(version, ts), ListOffsetsResponse)
            part = answer.topics[0].partitions[0]
            return part.error_code, part.offset, part.timestamp

        assert ask(7, MAX_TIMESTAMP) == (0, -1, -1)  # empty: no offset, as Kafka
        client.call(produce_request("t", 0, batch(3, ts=1000)), ProduceResponse)
        client.call(produce_request("t", 0, batch(2, start=3, ts=7000)), ProduceResponse)
        client.call(produce_request("t", 0, batch(2, start=5, ts=5000)), ProduceResponse)
        for version in (6, 7):
            assert ask(version, -2)[:2] == (0, 0)
            assert ask(version, -1)[:2] == (0, 7)
            assert ask(version, 3000) == (0, 3, 7000)
        assert ask(7, MAX_TIMESTAMP) == (0, 3, 7000)  # the first offset holding the largest
        assert ask(6, MAX_TIMESTAMP)[0] == ErrorCode.INVALID_REQUEST  # MAX_TIMESTAMP is v7's
        assert ask(5, MAX_TIMESTAMP)[0] == ErrorCode.INVALID_REQUEST


def test_a_null_in_a_flexible_request_is_refused_and_the_connection_kept(broker) -> None:
    with RawClient(broker.address) as client:
        answer = client.call(_list_offsets(7, -1, name=None), ListOffsetsResponse)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
        md = client.call(MetadataRequest[8](topics=None, allow_auto_topic_creation=False,
                                            include_cluster_authorized_operations=False,
                                            include_topic_authorized_operations=False),
                         MetadataResponse)  # fmt: skip
        assert sorted(t.name for t in md.topics) == ["lat", "t"]


class _View:
    """Two groups: one with a fresh member, one with positions only."""

    def group_ids(self) -> list[str]:
        return ["busy", "idle"]

    def group(self, group_id: str) -> GroupSnapshot | None:
        members = (GroupMember("w/1", "w", (("t", (0, 1)),)),) if group_id == "busy" else ()
        return GroupSnapshot(group_id, members, {("t", 0): 4}, ("t",))


@pytest.fixture
def group_broker(tmp_path) -> Iterator[BrokerThread]:
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("t", 2)
    config = BrokerConfig(data_dir=data, port=0, group_view=lambda _dir, _layout: _View())
    with BrokerThread(config) as running:
        yield running


def test_list_groups_v3_to_v5_states_and_types(group_broker) -> None:
    with RawClient(group_broker.address) as client:

        def listed(version: int, **filters: list[str]) -> list[tuple[str, ...]]:
            answer = client.call(ListGroupsRequest[version](**filters), ListGroupsResponse)
            assert answer.error_code == 0
            out = []
            for g in answer.groups:
                row = (g.group_id, g.protocol_type)
                if version >= 4:
                    row += (g.group_state,)
                if version >= 5:
                    row += (g.group_type,)
                out.append(row)
            return out

        assert listed(3) == [("busy", "consumer"), ("idle", "consumer")]
        assert listed(4, states_filter=[]) == [
            ("busy", "consumer", "Stable"),
            ("idle", "consumer", "Empty"),
        ]
        assert listed(4, states_filter=["empty"]) == [("idle", "consumer", "Empty")]
        assert listed(5, states_filter=["Stable"], types_filter=["Classic", "consumer"]) == [
            ("busy", "consumer", "Stable", "classic")
        ]
        assert listed(5, states_filter=[], types_filter=["share"]) == []
