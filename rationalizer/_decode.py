"""``decode``: one coordination record to its message object (PROTOCOL.md, "Record value").

The strict field readers are :mod:`._codec`'s (the world's replay reads fields and never
builds messages); this module only dispatches on the version byte and builds the message
those fields make: the admin tools, the audit and the tests read messages.
"""

from __future__ import annotations

from ._codec import (
    T_CLAIMING_PARTITION,
    T_HEARTBEAT,
    T_HEARTBEATING_TASK,
    T_LEAVING_GROUP,
    T_RELEASE_GROUP,
    T_RELEASING_PARTITION,
    VERSION_4,
    VERSION_6,
    decode_fields,
    decode_member_fields,
    decode_reservation_fields,
    decode_task_fields,
    decode_v6_fields,
    decode_v7_fields,
    decode_v8_fields,
    decode_v9_fields,
)
from ._messages import (
    AnnouncingMember,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    HeartbeatingTask,
    LeavingGroup,
    MemberHeartbeat,
    Message,
    NamingTenure,
    ReleaseGroup,
    ReleasingPartition,
    ReleasingTask,
)

__all__ = ["decode"]


def decode(key: bytes, value: bytes) -> Message:
    """Decode one ``(key, value)`` record; raises only :class:`DecodeError`."""
    if isinstance(value, bytes | bytearray | memoryview):
        if value[:1] == b"\x09":
            return _decode_v9(key, value)
        if value[:1] == b"\x08":
            return _decode_v8(key, value)
        if value[:1] == b"\x07":
            return _decode_v7(key, value)
        if value[:1] == b"\x06":
            return _decode_v6(key, value)
        if value[:1] == b"\x03":
            return _decode_task(key, value)
        if value[:2] == b"\x04\x04":
            return _decode_reservation(key, value)
        if value[:1] in (b"\x02", b"\x04"):
            return _decode_member(key, value)
    return _decode_v1(key, value)


def _decode_v9(key: object, value: object) -> Message:
    client, instance, group, topic, partition, _ = decode_v9_fields(key, value)
    return NamingTenure(
        client_id=client, instance_id=instance, group_id=group, topic=topic, partition=partition
    )


def _decode_v8(key: object, value: object) -> Message:
    client, instance, group, topic, partition, hb, tenure, vector, _ = decode_v8_fields(key, value)
    return HeartbeatingTask(
        client_id=client,
        instance_id=instance,
        group_id=group,
        topic=topic,
        partition=partition,
        heartbeat_interval_ms=hb,
        positions=vector,
        tenure=tenure,
    )


def _decode_v7(key: object, value: object) -> Message:
    client, instance, group, hb, entries = decode_v7_fields(key, value)
    return MemberHeartbeat(
        client_id=client,
        instance_id=instance,
        group_id=group,
        heartbeat_interval_ms=hb,
        entries=tuple(entries),
    )


def _decode_v6(key: object, value: object) -> Message:
    typ, client, instance, group, topic, partition, number, _, last, vector = decode_v6_fields(
        key, value
    )
    if typ == T_CLAIMING_PARTITION:
        return ClaimingPartition(
            client_id=client,
            instance_id=instance,
            group_id=group,
            topic=topic,
            partition=partition,
            heartbeat_interval_ms=number,
            version=VERSION_6,
        )
    if vector is not None:
        return ReleasingTask(
            client_id=client,
            instance_id=instance,
            group_id=group,
            topic=topic,
            partition=partition,
            positions=vector,
            tenure=number,
        )
    return ReleasingPartition(
        client_id=client,
        instance_id=instance,
        group_id=group,
        topic=topic,
        partition=partition,
        last_offset=last,
        tenure=number,
    )


def _decode_task(key: object, value: object) -> Message:
    typ, client, instance, group, topic, partition, hb, vector, _ = decode_task_fields(key, value)
    if typ == T_HEARTBEATING_TASK:
        return HeartbeatingTask(
            client_id=client,
            instance_id=instance,
            group_id=group,
            topic=topic,
            partition=partition,
            positions=vector,
            heartbeat_interval_ms=hb,
        )
    return ReleasingTask(
        client_id=client,
        instance_id=instance,
        group_id=group,
        topic=topic,
        partition=partition,
        positions=vector,
    )


def _decode_reservation(key: object, value: object) -> Message:
    client, instance, group, topic, partition, first, last, _ = decode_reservation_fields(
        key, value
    )
    return ClaimingMessages(
        client_id=client,
        instance_id=instance,
        group_id=group,
        topic=topic,
        partition=partition,
        proposed_last_offset=last,
        first_offset=first,
        version=VERSION_4,
    )


def _decode_member(key: object, value: object) -> Message:
    typ, client, instance, group, topics, hb, weight, cap, entire, version = decode_member_fields(
        key, value
    )
    if typ == T_LEAVING_GROUP:
        return LeavingGroup(client_id=client, instance_id=instance, group_id=group)
    return AnnouncingMember(
        client_id=client,
        instance_id=instance,
        group_id=group,
        topics=topics,
        heartbeat_interval_ms=hb,
        weight=weight,
        max_claims=cap,
        entire_topic=entire,
        version=version,
    )


def _decode_v1(key: object, value: object) -> Message:
    """The version 1 types (and a version 5 ClaimingPartition)."""
    typ, client, instance, group, topic, partition, number, _, hb, tag = decode_fields(key, value)
    if typ == T_RELEASE_GROUP:
        assert number is not None  # (its expiry)
        return ReleaseGroup(
            client_id=client,
            instance_id=instance,
            group_id=group,
            msg_expire_time=number,
            auth_tag=tag,
        )
    assert topic is not None and partition is not None  # (a partition type)
    if typ == T_CLAIMING_PARTITION:
        assert hb is not None and isinstance(value, bytes | bytearray | memoryview)
        return ClaimingPartition(
            client_id=client,
            instance_id=instance,
            group_id=group,
            topic=topic,
            partition=partition,
            heartbeat_interval_ms=hb,
            version=value[0],
        )
    assert number is not None  # (a claim has none: it returned above)
    if typ == T_HEARTBEAT:
        assert hb is not None
        return Heartbeat(
            client_id=client,
            instance_id=instance,
            group_id=group,
            topic=topic,
            partition=partition,
            last_offset=number,
            heartbeat_interval_ms=hb,
            auth_tag=tag,
        )
    if typ == T_RELEASING_PARTITION:
        return ReleasingPartition(
            client_id=client,
            instance_id=instance,
            group_id=group,
            topic=topic,
            partition=partition,
            last_offset=number,
        )
    return ClaimingMessages(
        client_id=client,
        instance_id=instance,
        group_id=group,
        topic=topic,
        partition=partition,
        proposed_last_offset=number,
    )
