"""Kafka's group APIs, read-only, answered from a group view the broker is given.

The broker does not run Kafka's classic consumer groups: logmarshal's groups coordinate in
``__marshal``, and ``storage`` knows nothing of coordination. What operators' tools need
(FindCoordinator, ListGroups, DescribeGroups, OffsetFetch: kafka-consumer-groups, the
admin clients, a consumer's ``committed()``) is answered from a
:class:`GroupViewProvider`, which ``logmarshal broker start`` implements by replaying ``__marshal`` with the consumers' own
rationalizer. Without a provider the broker knows no group.

A client that tries classic group consumption is refused at once, never left waiting:
SyncGroup, Heartbeat, LeaveGroup and OffsetCommit get GROUP_AUTHORIZATION_FAILED (a
non-retriable error clients hand to the application). Those responses carry no text, so
JoinGroup answers NOT_COORDINATOR, which sends the client back to FindCoordinator, and a
FindCoordinator for that group from the same client id within a few seconds of a refusal
gets GROUP_AUTHORIZATION_FAILED with :data:`CLASSIC_REFUSED` as its error message, which
librdkafka passes to ``poll()``. The broker logs the same text. The short memory keeps an
admin tool that happens to share the client id and the group from being refused for long.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, Protocol

import attrs
from kafka.protocol.admin.groups import DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer.group import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse

from .cluster_file import ClusterLayout
from .errors import ErrorCode
from .pacing import Pace

__all__ = [
    "CLASSIC_REFUSED",
    "NO_TRANSACTIONS",
    "GroupHandlers",
    "GroupMember",
    "GroupSnapshot",
    "GroupViewProvider",
    "consumer_assignment",
    "consumer_subscription",
]

log = logging.getLogger(__name__)

CLASSIC_REFUSED = (
    "logmarshal's broker does not run Kafka consumer groups: its groups coordinate through "
    "__marshal. Consume with logmarshal's Consumer (logmarshal.Consumer) and move a group's "
    "position with `logmarshal group reset`; Kafka tools can list, describe and read the "
    "positions of a group (read-only)."
)
NO_TRANSACTIONS = (
    "logmarshal's broker has no transactions (nor any coordinator but the read-only group "
    "view): produce without transactional.id; idempotent producers are served"
)
PROTOCOL_TYPE = "consumer"
PROTOCOL_NAME = "marshal"
#: Kafka's group type (ListGroups v5): a Marshal group looks like a classic consumer group,
#: which is what DescribeGroups describes
GROUP_TYPE = "classic"
_GROUP_KEY = 0
_REFUSAL_MEMORY_S = 3.0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@attrs.frozen
class GroupMember:
    """A member as Kafka describes one: a fresh holder of the group's partitions."""

    member_id: str
    client_id: str
    assignment: tuple[tuple[str, tuple[int, ...]], ...]  # (topic, partitions) sorted


@attrs.frozen
class GroupSnapshot:
    """One group as the coordination log says it is now."""

    group_id: str
    members: tuple[GroupMember, ...]
    positions: Mapping[tuple[str, int], int]  # next offset to consume, per partition
    topics: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """Kafka's group states: Stable with members, Empty with only positions."""
        return "Stable" if self.members else "Empty"


class GroupViewProvider(Protocol):
    """What the broker needs to know about groups; called from worker threads.

    It must see every coordination partition, also those other brokers lead: every broker
    answers FindCoordinator with itself. An optional ``close()`` is called at shutdown.
    """

    def group_ids(self) -> list[str]: ...

    def group(self, group_id: str) -> GroupSnapshot | None: ...


def _string(out: bytearray, text: str) -> None:
    raw = text.encode("utf-8")
    out += _I16.pack(len(raw)) + raw


def consumer_subscription(topics: Sequence[str]) -> bytes:
    """ConsumerProtocolSubscription v0: what a consumer member's metadata looks like."""
    out = bytearray(_I16.pack(0) + _I32.pack(len(topics)))
    for topic in topics:
        _string(out, topic)
    out += _I32.pack(-1)  # no user data
    return bytes(out)


def consumer_assignment(assignment: Sequence[tuple[str, Sequence[int]]]) -> bytes:
    """ConsumerProtocolAssignment v0: the partitions a member holds."""
    out = bytearray(_I16.pack(0) + _I32.pack(len(assignment)))
    for topic, partitions in assignment:
        _string(out, topic)
        out += _I32.pack(len(partitions))
        for p in partitions:
            out += _I32.pack(p)
    out += _I32.pack(0)  # empty user data (every parser accepts it)
    return bytes(out)


class GroupHandlers:
    """Handlers of the group APIs; see the module docstring for what is and is not served."""

    def __init__(
        self,
        layout: ClusterLayout,
        provider: GroupViewProvider | None,
        executor: Executor,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.layout = layout
        self.provider = provider
        self._executor = executor
        self._monotonic = monotonic
        self._refused: dict[tuple[str | None, str], float] = {}

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _group_ids(self) -> list[str]:
        return [] if self.provider is None else self.provider.group_ids()

    def _group(self, group_id: str) -> GroupSnapshot | None:
        return None if self.provider is None else self.provider.group(group_id)

    # ------------------------------------------------------------------ classic consumption

    def _note_refusal(self, client: str | None, group: str, api: str) -> None:
        now = self._monotonic()
        self._refused = {k: t for k, t in self._refused.items() if now - t < _REFUSAL_MEMORY_S}
        self._refused[(client, group)] = now
        log.warning("client %s: %s for group %r refused: %s", client, api, group, CLASSIC_REFUSED)

    def _was_refused(self, client: str | None, group: str) -> bool:
        at = self._refused.get((client, group))
        return at is not None and self._monotonic() - at < _REFUSAL_MEMORY_S

    async def join_group(self, request: Any, version: int, client: str | None) -> Any:
        self._note_refusal(client, request.group_id, "JoinGroup")
        # NOT_COORDINATOR sends the client back to FindCoordinator, which explains (above).
        return JoinGroupResponse[version](
            throttle_time_ms=0,
            error_code=ErrorCode.NOT_COORDINATOR,
            generation_id=-1,
            protocol_name="",
            leader="",
            member_id=request.member_id or "",
            members=[],
        )

    async def sync_group(self, request: Any, version: int, client: str | None) -> Any:
        self._note_refusal(client, request.group_id, "SyncGroup")
        return SyncGroupResponse[version](
            throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b""
        )

    async def heartbeat(self, request: Any, version: int, client: str | None) -> Any:
        self._note_refusal(client, request.group_id, "Heartbeat")
        return HeartbeatResponse[version](
            throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
        )

    async def leave_group(self, request: Any, version: int, client: str | None) -> Any:
        self._note_refusal(client, request.group_id, "LeaveGroup")
        return LeaveGroupResponse[version](
            throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[]
        )

    async def offset_commit(self, request: Any, version: int, client: str | None) -> Any:
        self._note_refusal(client, request.group_id, "OffsetCommit")
        r = OffsetCommitResponse[version]
        topic_cls = r.OffsetCommitResponseTopic
        part_cls = topic_cls.OffsetCommitResponsePartition
        topics, pace = [], Pace()
        for t in request.topics:
            parts = []
            for p in t.partitions:
                await pace()
                parts.append(
                    part_cls(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    )
                )
            topics.append(topic_cls(name=t.name, partitions=parts))
        return r(throttle_time_ms=0, topics=topics)

    # ------------------------------------------------------------------ read-only views

    async def find_coordinator(self, request: Any, version: int, client: str | None) -> Any:
        r = FindCoordinatorResponse[version]
        key_type = getattr(request, "key_type", _GROUP_KEY) if version >= 1 else _GROUP_KEY
        error, message = ErrorCode.NONE, None
        if key_type != _GROUP_KEY:
            # Not COORDINATOR_NOT_AVAILABLE: that is retriable, and a transactional producer
            # would look for a coordinator until max.block.ms. UNSUPPORTED_VERSION is final:
            # the Java producer fails initTransactions at once with this message.
            error, message = ErrorCode.UNSUPPORTED_VERSION, NO_TRANSACTIONS
        elif self._was_refused(client, request.key):
            error, message = ErrorCode.GROUP_AUTHORIZATION_FAILED, CLASSIC_REFUSED
        me = self.layout.me
        ok = error == ErrorCode.NONE
        return r(
            throttle_time_ms=0,
            error_code=error,
            error_message=message,
            node_id=me.node_id if ok else -1,
            host=me.host if ok else "",
            port=me.port if ok else -1,
        )

    async def list_groups(self, request: Any, version: int, client: str | None) -> Any:
        r = ListGroupsResponse[version]
        try:
            ids = await self._call(self._group_ids)
        except Exception:
            log.exception("the group view failed")
            return r(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, groups=[])
        states = {s.lower() for s in getattr(request, "states_filter", None) or ()}
        types = {t.lower() for t in getattr(request, "types_filter", None) or ()}
        if types and GROUP_TYPE not in types:
            ids = []
        listed = []
        for group_id in ids:
            state = ""
            if version >= 4:  # the state is in the answer: ask the view for it
                try:
                    snap = await self._call(self._group, group_id)
                except Exception:
                    log.exception("the group view failed for %r", group_id)
                    continue
                if snap is None:
                    continue
                state = snap.state
                if states and state.lower() not in states:
                    continue
            listed.append(
                r.ListedGroup(
                    group_id=group_id,
                    protocol_type=PROTOCOL_TYPE,
                    group_state=state,
                    group_type=GROUP_TYPE,
                )
            )
        return r(throttle_time_ms=0, error_code=0, groups=listed)

    async def describe_groups(self, request: Any, version: int, client: str | None) -> Any:
        r = DescribeGroupsResponse[version]
        described = []
        # each group looked up once (a request naming one group a million times took the
        # I/O threads for two minutes), answered as often as it is named, as Kafka does
        looked_up: dict[str, tuple[GroupSnapshot | None, ErrorCode]] = {}
        pace = Pace()
        for group_id in request.groups:
            await pace()
            if group_id in looked_up:
                snap, error = looked_up[group_id]
            else:
                try:
                    snap = await self._call(self._group, group_id)
                    error = ErrorCode.NONE
                except Exception:
                    log.exception("the group view failed for %r", group_id)
                    snap, error = None, ErrorCode.COORDINATOR_NOT_AVAILABLE
                looked_up[group_id] = snap, error
            if snap is None:
                # Kafka's answer for a group it does not know: no error, state Dead.
                described.append(
                    r.DescribedGroup(
                        error_code=error,
                        group_id=group_id,
                        group_state="Dead",
                        protocol_type="",
                        protocol_data="",
                        members=[],
                        authorized_operations=None,
                    )
                )
                continue
            members = [
                r.DescribedGroup.DescribedGroupMember(
                    member_id=m.member_id,
                    group_instance_id=None,
                    client_id=m.client_id,
                    client_host="",
                    member_metadata=consumer_subscription(snap.topics),
                    member_assignment=consumer_assignment(m.assignment),
                )
                for m in snap.members
            ]
            described.append(
                r.DescribedGroup(
                    error_code=0,
                    group_id=group_id,
                    group_state=snap.state,
                    protocol_type=PROTOCOL_TYPE,
                    protocol_data=PROTOCOL_NAME if members else "",
                    members=members,
                    authorized_operations=None,
                )
            )
        return r(throttle_time_ms=0, groups=described)

    async def offset_fetch(self, request: Any, version: int, client: str | None) -> Any:
        r = OffsetFetchResponse[version]
        topic_cls = r.OffsetFetchResponseTopic
        part_cls = topic_cls.OffsetFetchResponsePartition
        try:
            snap = await self._call(self._group, request.group_id)
        except Exception:
            log.exception("the group view failed for %r", request.group_id)
            return r(throttle_time_ms=0, topics=[], error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        positions = dict(snap.positions) if snap is not None else {}
        if request.topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(positions):
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in request.topics}
        topics, pace = [], Pace()
        for topic, partitions in wanted.items():
            parts = []
            for p in partitions:
                await pace()
                parts.append(
                    part_cls(
                        partition_index=p,
                        committed_offset=positions.get((topic, p), -1),
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=0,
                    )
                )
            topics.append(topic_cls(name=topic, partitions=parts))
        return r(throttle_time_ms=0, topics=topics, error_code=0)
