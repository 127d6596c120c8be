"""Coordination messages written one at a time, directly: Go Marshal's low-level API.

A :class:`~logmarshal.Consumer` never uses this: its core encodes its own records and the
Marshaler writes them (:meth:`~logmarshal.Marshaler.write_records`). Tools and tests that
must act as a member by hand do: claim a partition, heartbeat a position, reserve messages,
release, as ``marshaler``'s very instance, and then read the record's verdict once the
replay reaches it (read-your-writes)::

    landed = direct.claim_partition(marshaler, "events", 0)
    verdict = direct.wait_verdict(marshaler, landed, timeout=5)
    if verdict is not None and verdict.accepted:
        direct.heartbeat(marshaler, "events", 0, last_offset=41)

Every record carries ``marshaler``'s client, instance and group ids, and claims and
heartbeats its HB (PROTOCOL.md, "Record value, version 1"). ReleaseGroup is the admin's
(:mod:`logmarshal.admin`), written to every coordination partition.
"""

from __future__ import annotations

from rationalizer import (
    PROTOCOL_VERSION,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    HeartbeatingTask,
    ReleaseGroup,
    ReleasingPartition,
    ReleasingTask,
    Verdict,
    encode,
)

from .core.claims import claim_version
from .core.records import WriterIds
from .errors import ClosedError
from .marshaler import Landed, Marshaler

__all__ = [
    "claim_messages",
    "claim_partition",
    "heartbeat",
    "release_partition",
    "send",
    "verdict",
    "wait_verdict",
]


#: The records that name a partition (or a task), which :func:`send` writes to that key's
#: coordination partition; membership records and ReleaseGroup name none.
PartitionMessage = (
    Heartbeat
    | ClaimingPartition
    | ReleasingPartition
    | ClaimingMessages
    | HeartbeatingTask
    | ReleasingTask
)


def send(marshaler: Marshaler, message: PartitionMessage) -> Landed:
    """Write ``message`` durably to its coordination partition."""
    if marshaler.closed:
        raise ClosedError("the marshaler is closed")
    if isinstance(message, ReleaseGroup):  # a caller without the type checker's word
        raise TypeError("ReleaseGroup is written to every coordination partition by the admin")
    cp = marshaler.coordination_partition(message.topic, message.partition)
    return marshaler.write_records(cp, [encode(message)])[0]


def _ids(marshaler: Marshaler) -> WriterIds:
    return {
        "client_id": marshaler.client_id,
        "instance_id": marshaler.instance_id,
        "group_id": marshaler.group_id,
    }


def claim_partition(marshaler: Marshaler, topic: str, partition: int) -> Landed:
    """ClaimingPartition: accepted if the partition is claimable when it lands."""
    return send(
        marshaler,
        ClaimingPartition(
            **_ids(marshaler),
            topic=topic,
            partition=partition,
            heartbeat_interval_ms=marshaler.heartbeat_interval_ms,
            version=claim_version(PROTOCOL_VERSION),
        ),
    )


def heartbeat(marshaler: Marshaler, topic: str, partition: int, last_offset: int) -> Landed:
    """Heartbeat: renews our claim and sets the position (``last_offset``, inclusive)."""
    return send(
        marshaler,
        Heartbeat(
            **_ids(marshaler),
            topic=topic,
            partition=partition,
            last_offset=last_offset,
            heartbeat_interval_ms=marshaler.heartbeat_interval_ms,
        ),
    )


def release_partition(
    marshaler: Marshaler, topic: str, partition: int, last_offset: int, tenure: int | None = None
) -> Landed:
    """ReleasingPartition: gives our claim up at ``last_offset``; with ``tenure`` (the offset
    our claim landed at) a version 6 release, which ends only that tenure."""
    return send(
        marshaler,
        ReleasingPartition(
            **_ids(marshaler),
            topic=topic,
            partition=partition,
            last_offset=last_offset,
            tenure=tenure,
        ),
    )


def claim_messages(
    marshaler: Marshaler, topic: str, partition: int, proposed_last_offset: int
) -> Landed:
    """ClaimingMessages: reserves messages through ``proposed_last_offset`` (AMO)."""
    return send(
        marshaler,
        ClaimingMessages(
            **_ids(marshaler),
            topic=topic,
            partition=partition,
            proposed_last_offset=proposed_last_offset,
        ),
    )


def verdict(marshaler: Marshaler, landed: Landed) -> Verdict | None:
    """The verdict of a record already applied (None if not applied or too old)."""
    cp = landed.coordination_partition
    with marshaler.replay_locks()[cp]:
        return marshaler.worlds()[cp].verdict(landed.offset)


def wait_verdict(marshaler: Marshaler, landed: Landed, timeout: float) -> Verdict | None:
    """Read-your-writes: the verdict of ``landed`` once replay reaches it; None on timeout."""
    if not marshaler.wait_applied(landed.coordination_partition, landed.offset, timeout):
        return None
    return verdict(marshaler, landed)
