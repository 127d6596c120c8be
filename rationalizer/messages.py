"""Coordination messages of the ``__marshal`` topic as frozen attrs classes.

The classes validate on construction so an invalid message can never be encoded; the
decoder applies the very same limits, so every decoded message is also constructible.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

__all__ = [
    "AUTH_TAG_BYTES",
    "MAX_HEARTBEAT_INTERVAL_MS",
    "MAX_ID_BYTES",
    "MAX_OFFSET",
    "MAX_PARTITION",
    "MAX_TOPIC_LENGTH",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "ClaimingMessages",
    "ClaimingPartition",
    "Heartbeat",
    "Message",
    "ReleaseGroup",
    "ReleasingPartition",
    "valid_id",
    "valid_topic",
]

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})

#: Ids are bounded so a hostile record cannot make every replayer allocate megabytes.
MAX_ID_BYTES = 1024
#: Kafka's own limit (Topic.MAX_NAME_LENGTH).
MAX_TOPIC_LENGTH = 249
#: Kafka partitions are int32.
MAX_PARTITION = 2**31 - 1
#: Kafka offsets and timestamps are int64.
MAX_OFFSET = 2**63 - 1
#: A sender's lease (heartbeat interval) is at most one hour: a holder stays in the way of
#: everybody else for up to 2*HB after its last message, so an unbounded value would let one
#: misconfigured or hostile client lock a partition for days.
MAX_HEARTBEAT_INTERVAL_MS = 3_600_000
#: Length of an HMAC-SHA256 tag.
AUTH_TAG_BYTES = 32

_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]+\Z")


def valid_id(value: object) -> bool:
    """True for a non-empty ``str`` whose UTF-8 form has at most MAX_ID_BYTES bytes."""
    if type(value) is not str or not value:
        return False
    try:
        return len(value.encode("utf-8")) <= MAX_ID_BYTES
    except UnicodeEncodeError:  # lone surrogates
        return False


def valid_topic(value: object) -> bool:
    """True for a topic name Kafka would accept (legal chars, length, not '.' or '..')."""
    return (
        type(value) is str
        and 0 < len(value) <= MAX_TOPIC_LENGTH
        and value not in (".", "..")
        and _TOPIC_RE.match(value) is not None
    )


def _is_int(value: object) -> bool:
    return type(value) is int  # bool and int subclasses are refused on purpose


def _check_id(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not valid_id(value):
        raise ValueError(
            f"{attribute.name} must be a non-empty str of at most {MAX_ID_BYTES} UTF-8 bytes, "
            f"got {value!r}"
        )


def _check_topic(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not valid_topic(value):
        raise ValueError(f"{attribute.name} is not a valid Kafka topic name: {value!r}")


def _check_partition(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _is_int(value) or not 0 <= value <= MAX_PARTITION:  # type: ignore[operator]
        raise ValueError(f"{attribute.name} must be an int in [0, {MAX_PARTITION}], got {value!r}")


def _check_offset(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _is_int(value) or not -1 <= value <= MAX_OFFSET:  # type: ignore[operator]
        raise ValueError(f"{attribute.name} must be an int in [-1, {MAX_OFFSET}], got {value!r}")


def _check_time(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _is_int(value) or not 0 <= value <= MAX_OFFSET:  # type: ignore[operator]
        raise ValueError(f"{attribute.name} must be an int in [0, {MAX_OFFSET}], got {value!r}")


def _check_heartbeat_interval(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _is_int(value) or not 1 <= value <= MAX_HEARTBEAT_INTERVAL_MS:  # type: ignore[operator]
        raise ValueError(
            f"{attribute.name} must be an int in [1, {MAX_HEARTBEAT_INTERVAL_MS}] (ms), "
            f"got {value!r}"
        )


def _check_auth_tag(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (type(value) is not bytes or len(value) != AUTH_TAG_BYTES):
        raise ValueError(
            f"{attribute.name} must be None or {AUTH_TAG_BYTES} bytes (HMAC-SHA256), got {value!r}"
        )


def _check_version(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _is_int(value) or value not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"{attribute.name} must be one of {sorted(SUPPORTED_VERSIONS)}, got {value!r}"
        )


def _id() -> Any:
    return attrs.field(validator=_check_id)


def _version() -> Any:
    return attrs.field(default=PROTOCOL_VERSION, kw_only=True, validator=_check_version)


def _heartbeat_interval() -> Any:
    return attrs.field(validator=_check_heartbeat_interval)


def _auth_tag() -> Any:
    return attrs.field(default=None, validator=_check_auth_tag)


@attrs.frozen(kw_only=True)
class Heartbeat:
    """The holder is alive and has fully handled everything up to ``last_offset``.

    ``heartbeat_interval_ms`` is the sender's lease length (HB); an accepted heartbeat records
    it on the partition and freshness of the holder is judged with it. ``auth_tag`` is only
    used by a pausing admin of a group with an admin key (see :mod:`rationalizer.auth`).
    """

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    topic: str = attrs.field(validator=_check_topic)
    partition: int = attrs.field(validator=_check_partition)
    last_offset: int = attrs.field(validator=_check_offset)
    heartbeat_interval_ms: int = _heartbeat_interval()
    auth_tag: bytes | None = _auth_tag()
    version: int = _version()


@attrs.frozen(kw_only=True)
class ClaimingPartition:
    """A bid for a partition; the earliest claim in log order on a claimable partition wins.

    ``heartbeat_interval_ms`` is the claimant's lease length (HB), recorded on acceptance.
    """

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    topic: str = attrs.field(validator=_check_topic)
    partition: int = attrs.field(validator=_check_partition)
    heartbeat_interval_ms: int = _heartbeat_interval()
    version: int = _version()


@attrs.frozen(kw_only=True)
class ReleasingPartition:
    """The holder gives the partition up cleanly, recording its final position."""

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    topic: str = attrs.field(validator=_check_topic)
    partition: int = attrs.field(validator=_check_partition)
    last_offset: int = attrs.field(validator=_check_offset)
    version: int = _version()


@attrs.frozen(kw_only=True)
class ClaimingMessages:
    """AMO: the holder reserves messages up to ``proposed_last_offset`` before handing them out."""

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    topic: str = attrs.field(validator=_check_topic)
    partition: int = attrs.field(validator=_check_partition)
    proposed_last_offset: int = attrs.field(validator=_check_offset)
    version: int = _version()


@attrs.frozen(kw_only=True)
class ReleaseGroup:
    """Admin: void every claim of the group and pause it until ``msg_expire_time`` (log ms).

    ``auth_tag`` (HMAC-SHA256, see :mod:`rationalizer.auth`) is required by replayers that hold
    an admin key for the group.
    """

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    msg_expire_time: int = attrs.field(validator=_check_time)
    auth_tag: bytes | None = _auth_tag()
    version: int = _version()


Message = Heartbeat | ClaimingPartition | ReleasingPartition | ClaimingMessages | ReleaseGroup
