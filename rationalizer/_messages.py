"""Coordination messages of the ``__marshal`` topic as frozen attrs classes.

The classes validate on construction so an invalid message can never be encoded; the
decoder applies the very same limits, so every decoded message is also constructible.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeGuard, cast

import attrs

__all__ = [
    "ANNOUNCED_VERSION",
    "AUTH_TAG_BYTES",
    "FUTURE_VERSIONS",
    "MAX_BEAT_ENTRIES",
    "MAX_HEARTBEAT_INTERVAL_MS",
    "MAX_ID_BYTES",
    "MAX_MEMBER_TOPICS",
    "MAX_OFFSET",
    "MAX_PARTITION",
    "MAX_TASK_SOURCES",
    "MAX_TOPIC_LENGTH",
    "MAX_WEIGHT",
    "MESSAGE_NAMES",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "AnnouncingMember",
    "BeatEntry",
    "ClaimingMessages",
    "ClaimingPartition",
    "Heartbeat",
    "HeartbeatingTask",
    "LeavingGroup",
    "MemberHeartbeat",
    "Message",
    "NamingTenure",
    "Positions",
    "ReleaseGroup",
    "ReleasingPartition",
    "ReleasingTask",
    "task_last_offset",
    "valid_id",
    "valid_positions",
    "valid_topic",
]

#: The newest protocol version this code speaks. Byte 0 of a record is the version that
#: introduced its type: the five partition and group types are version 1 and are still
#: written so; the membership types (``AnnouncingMember``, ``LeavingGroup``) are version 2;
#: the task types (``HeartbeatingTask``, ``ReleasingTask``) are version 3. Version 4 (at-most-once
#: enforced by the log) adds a ``ClaimingMessages`` that names its first offset and an
#: ``AnnouncingMember`` whose version byte says which protocol its writer speaks. Version 5
#: (leases the log took away early are kept) adds a ``ClaimingPartition`` layout that is
#: refused while such a lease may still run; membership records keep version 4's layouts.
#: Version 6 (releases that name their tenure) defines the envelope every later version
#: keeps (version, type, a CRC-32, the group id) and a ``ReleasingPartition`` that names the
#: tenure it ends: the log offset of the claim or restart takeover that began it.
#: Version 7 adds the ``MemberHeartbeat``: one record per member and coordination partition
#: that heartbeats every partition it holds there, each entry naming its tenure.
#: Version 8 adds a ``HeartbeatingTask`` that names its tenure (a task's heartbeat, as a
#: MemberHeartbeat's entry does for a partition).
#: Version 9 adds ``NamingTenure``: the holder of a tenure without a name (begun by a claim
#: of version 1 or 5, or a restart takeover of such a tenure) names it, so that its
#: heartbeats join its MemberHeartbeats and its late writes are judged by their tenure.
PROTOCOL_VERSION = 9
SUPPORTED_VERSIONS = frozenset({1, 2, 3, 4, 5, 6, 7, 8, 9})
#: The version byte of what a member of this release announces: version 5 changed no
#: membership rule, and a byte 5 announcement would stop every version 4 replayer of the
#: group's membership partition (PROTOCOL.md, "Version 5").
ANNOUNCED_VERSION = 4
#: Version bytes kept for protocol versions to come. From version 6 on a record of such a
#: version is recognised by its envelope (PROTOCOL.md, "Version 6"): a well-formed one stops
#: the replay of the group it names rather than let this replayer skip a record whose rules
#: it does not know; anything else (a bad check, no group) is not a coordination record at
#: all (skipped, counted).
FUTURE_VERSIONS = range(10, 16)

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
#: How many topics one announcement may list (it is replayed by every member).
MAX_MEMBER_TOPICS = 10_000
#: A member's relative capacity in the balanced target.
MAX_WEIGHT = 1000
#: Length of an HMAC-SHA256 tag.
AUTH_TAG_BYTES = 32
#: How many source topics one task's position vector may have (it is in every heartbeat).
MAX_TASK_SOURCES = 64

#: How many partitions one MemberHeartbeat may carry: far more than one member holds in one
#: coordination partition (a member holding more writes several records), and a bound on
#: what one record makes every replayer do. An entry takes 3 to 23 bytes (its topic once
#: per topic), so this many entries of one topic fit a 1 MiB record whatever their numbers.
MAX_BEAT_ENTRIES = 32_768

#: A task's position vector: ``(source topic, last_offset)`` pairs, sorted by topic.
Positions = tuple[tuple[str, int], ...]

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


def _is_int(value: object) -> TypeGuard[int]:
    return type(value) is int  # bool and int subclasses are refused on purpose


def task_last_offset(positions: Positions) -> int:
    """The scalar ``last_offset`` a task's position vector stands for in the world:
    ``sum(last_offset + 1) - 1`` over its sources, i.e. the number of input records the task
    consumed, minus one. It is monotone when every source's position is, so lag tools and
    ``resume_offset`` stay meaningful for a task's key (PROTOCOL.md, "Tasks")."""
    return sum(offset for _, offset in positions) + len(positions) - 1


def valid_positions(value: object) -> bool:
    """True for a task position vector: a tuple of 1..MAX_TASK_SOURCES ``(topic,
    last_offset)`` pairs, topics valid and strictly ascending, each offset in -1..2^63-1, and
    the scalar (:func:`task_last_offset`) at most 2^63-1 as well."""
    if type(value) is not tuple or not 1 <= len(value) <= MAX_TASK_SOURCES:
        return False
    previous = None
    for item in value:
        if not (
            type(item) is tuple
            and len(item) == 2
            and valid_topic(item[0])
            and _is_int(item[1])
            and -1 <= item[1] <= MAX_OFFSET
            and (previous is None or previous < item[0])
        ):
            return False
        previous = item[0]
    return task_last_offset(value) <= MAX_OFFSET


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
    if not _is_int(value) or not 0 <= value <= MAX_PARTITION:
        raise ValueError(f"{attribute.name} must be an int in [0, {MAX_PARTITION}], got {value!r}")


def _check_offset(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _is_int(value) or not -1 <= value <= MAX_OFFSET:
        raise ValueError(f"{attribute.name} must be an int in [-1, {MAX_OFFSET}], got {value!r}")


def _check_time(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _is_int(value) or not 0 <= value <= MAX_OFFSET:
        raise ValueError(f"{attribute.name} must be an int in [0, {MAX_OFFSET}], got {value!r}")


def _check_heartbeat_interval(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _is_int(value) or not 1 <= value <= MAX_HEARTBEAT_INTERVAL_MS:
        raise ValueError(
            f"{attribute.name} must be an int in [1, {MAX_HEARTBEAT_INTERVAL_MS}] (ms), "
            f"got {value!r}"
        )


def _check_auth_tag(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (type(value) is not bytes or len(value) != AUTH_TAG_BYTES):
        raise ValueError(
            f"{attribute.name} must be None or {AUTH_TAG_BYTES} bytes (HMAC-SHA256), got {value!r}"
        )


def _version_check(of: str, *allowed: int) -> Any:
    """Validator of a ``version`` field: one of ``allowed`` (the layouts of one type)."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        if not _is_int(value) or value not in allowed:
            wanted = " or ".join(map(str, allowed))
            raise ValueError(f"{attribute.name} of {of} must be {wanted}, got {value!r}")

    return check


def _version_field(version: int, of: str, *also: int) -> Any:
    """The ``version`` field of a message type: keyword-only, ``version`` (the default) or
    one of ``also`` (later layouts of the same type), and nothing else."""
    return attrs.field(default=version, kw_only=True, validator=_version_check(of, version, *also))


def _check_weight(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _is_int(value) or not 1 <= value <= MAX_WEIGHT:
        raise ValueError(f"{attribute.name} must be an int in [1, {MAX_WEIGHT}], got {value!r}")


def _check_max_claims(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _is_int(value) or not 0 <= value <= MAX_PARTITION:
        raise ValueError(
            f"{attribute.name} must be an int in [0, {MAX_PARTITION}] (0: no limit), got {value!r}"
        )


def _check_member_topics(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    items = value if type(value) is tuple else ()
    ok = items is value and len(items) <= MAX_MEMBER_TOPICS
    previous = None
    for item in items if ok else ():
        if not (
            type(item) is tuple
            and len(item) == 2
            and valid_topic(item[0])
            and _is_int(item[1])
            and 0 <= item[1] <= MAX_PARTITION + 1
            and (previous is None or previous < item[0])
        ):
            ok = False
            break
        previous = item[0]
    if not ok:
        raise ValueError(
            f"{attribute.name} must be a tuple of at most {MAX_MEMBER_TOPICS} (topic, "
            f"partition count) pairs sorted by topic without repeats, got {value!r}"
        )


def _check_positions(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not valid_positions(value):
        raise ValueError(
            f"{attribute.name} must be a tuple of 1..{MAX_TASK_SOURCES} (source topic, "
            f"last_offset) pairs sorted by topic without repeats, each last_offset in "
            f"[-1, {MAX_OFFSET}] and their sum of (last_offset + 1) at most 2^63, got {value!r}"
        )


def _check_bool(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not bool:
        raise ValueError(f"{attribute.name} must be a bool, got {value!r}")


def _id() -> Any:
    return attrs.field(validator=_check_id)


def _version() -> Any:
    return _version_field(1, "a version 1 message type")


def _version_2() -> Any:
    return _version_field(2, "a membership message")


def _heartbeat_interval() -> Any:
    return attrs.field(validator=_check_heartbeat_interval)


def _auth_tag() -> Any:
    return attrs.field(default=None, validator=_check_auth_tag)


def _check_tenure(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not _is_int(value) or not 0 <= value <= MAX_OFFSET):
        raise ValueError(f"tenure must be an int in [0, {MAX_OFFSET}], got {value!r}")


def _tenure() -> Any:
    """The ``tenure`` a later layout of a type names (the offset of the claim or restart
    takeover that began it); None in the earlier layout."""
    return attrs.field(default=None, validator=_check_tenure)


def _tenure_version(of: str, without: int, named: int) -> Any:
    """The ``version`` of a type whose layout ``named`` adds a ``tenure`` to layout
    ``without``: its default follows ``tenure``."""
    return attrs.field(
        default=attrs.Factory(lambda m: without if m.tenure is None else named, takes_self=True),
        kw_only=True,
        validator=_version_check(of, without, named),
    )


def _check_tenure_version(msg: Any, without: int, named: int) -> None:
    """A message names its tenure exactly in layout ``named``."""
    if (msg.tenure is None) != (msg.version == without):
        raise ValueError(
            f"a version {named} {type(msg).__name__} names its tenure, version {without} none"
        )


@attrs.frozen(kw_only=True)
class Heartbeat:
    """The holder is alive and has fully handled everything up to ``last_offset``.

    ``heartbeat_interval_ms`` is the sender's lease length (HB); an accepted heartbeat records
    it on the partition and freshness of the holder is judged with it. ``auth_tag`` is only
    used by a pausing admin of a group with an admin key (see :mod:`rationalizer._auth`).
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
    #: 5 (version 5): also refused while a lease the log took away early may still run
    #: (PROTOCOL.md, property e); 1 for replayers of version 4 and before; 6 (version 6, in
    #: the envelope): judged as version 5, and its offset names the tenure it begins, which
    #: the tenure's version 6 release names
    version: int = _version_field(1, "a ClaimingPartition", 5, 6)


@attrs.frozen(kw_only=True)
class ReleasingPartition:
    """The holder gives the partition up cleanly, recording its final position.

    Version 6 names the ``tenure`` it ends: the log offset of the claim or restart takeover
    that began it. The log accepts it only from that tenure, so a release that lands late,
    after the same instance claimed the partition again, cannot end the new tenure
    (PROTOCOL.md, "Version 6"). Version 1 (``tenure`` None) is what older members write.
    """

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    topic: str = attrs.field(validator=_check_topic)
    partition: int = attrs.field(validator=_check_partition)
    last_offset: int = attrs.field(validator=_check_offset)
    tenure: int | None = _tenure()
    #: 1 without ``tenure``, 6 with it (the default follows ``tenure``)
    version: int = _tenure_version("a ReleasingPartition", 1, 6)

    def __attrs_post_init__(self) -> None:
        _check_tenure_version(self, 1, 6)


@attrs.frozen(kw_only=True)
class ClaimingMessages:
    """AMO: the holder reserves messages up to ``proposed_last_offset`` before handing them out.

    Version 4 names the reservation's ``first_offset`` too: the log accepts it only when that
    is exactly the partition's resume point, so a writer acting on a stale view is refused
    instead of believed, and accepted reservations are disjoint by construction. Version 1
    (``first_offset`` None) is what members of a group with older members still write.
    """

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    topic: str = attrs.field(validator=_check_topic)
    partition: int = attrs.field(validator=_check_partition)
    proposed_last_offset: int = attrs.field(validator=_check_offset)
    first_offset: int | None = attrs.field(default=None)
    #: 1 without ``first_offset``, 4 with it (the default follows ``first_offset``)
    version: int = attrs.field(
        default=attrs.Factory(lambda m: 1 if m.first_offset is None else 4, takes_self=True),
        kw_only=True,
        validator=_version_check("a ClaimingMessages", 1, 4),
    )

    @first_offset.validator
    def _check_first(self, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is None:
            return
        if not _is_int(value) or not 0 <= value <= self.proposed_last_offset:
            raise ValueError(
                f"first_offset must be an int in 0..proposed_last_offset "
                f"({self.proposed_last_offset}), got {value!r}"
            )

    def __attrs_post_init__(self) -> None:
        if (self.first_offset is None) != (self.version == 1):
            raise ValueError("a version 4 ClaimingMessages names its first_offset, version 1 none")


@attrs.frozen(kw_only=True)
class ReleaseGroup:
    """Admin: void every claim of the group and pause it until ``msg_expire_time`` (log ms).

    ``auth_tag`` (HMAC-SHA256, see :mod:`rationalizer._auth`) is required by replayers that hold
    an admin key for the group.
    """

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    msg_expire_time: int = attrs.field(validator=_check_time)
    auth_tag: bytes | None = _auth_tag()
    version: int = _version()


@attrs.frozen(kw_only=True)
class AnnouncingMember:
    """Version 2: "I am a member of this group, subscribed to these topics" (PROTOCOL.md,
    "Membership"). Sent while the member runs, whatever it holds, every third of its
    ``heartbeat_interval_ms``; it is a member while its last announcement is not stale.

    ``topics`` pairs every subscribed topic with the partition count the member sees, so the
    whole target can be computed from the log alone; ``weight``, ``max_claims`` (0: no limit)
    and ``entire_topic`` are what the balanced target needs to know of the member.
    """

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    topics: tuple[tuple[str, int], ...] = attrs.field(validator=_check_member_topics)
    heartbeat_interval_ms: int = _heartbeat_interval()
    weight: int = attrs.field(default=1, validator=_check_weight)
    max_claims: int = attrs.field(default=0, validator=_check_max_claims)
    entire_topic: bool = attrs.field(default=False, validator=_check_bool)
    #: 2, or the newest protocol version its writer speaks (4): members write records of
    #: version N only into a group whose live members all announce N or later
    version: int = _version_field(2, "an AnnouncingMember", 4)


@attrs.frozen(kw_only=True)
class LeavingGroup:
    """Version 2: the member leaves gracefully (after releasing what it held)."""

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    version: int = _version_2()


@attrs.frozen(kw_only=True)
class HeartbeatingTask:
    """Version 3: the holder of a *task* is alive and has fully handled every source up to
    its position (PROTOCOL.md, "Tasks").

    A task is partition ``partition`` of several co-partitioned source topics, claimed as
    one unit with an ordinary ``ClaimingPartition`` on the key ``group/topic/partition``,
    where ``topic`` is the task's name (e.g. ``"wordcount.task.0"``). ``positions`` pairs
    every source topic with its ``last_offset``, sorted by topic. Judged by rule 5 exactly
    like a :class:`Heartbeat` (no auth tag: only the admin's plain Heartbeat sets positions
    during a pause); when accepted the world records the vector and, as the key's scalar
    ``last_offset``, :attr:`last_offset`. Version 8 names the ``tenure`` it heartbeats in
    (property i: it counts only in that tenure, as a MemberHeartbeat's entry does).
    """

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    topic: str = attrs.field(validator=_check_topic)
    partition: int = attrs.field(validator=_check_partition)
    heartbeat_interval_ms: int = _heartbeat_interval()
    positions: Positions = attrs.field(validator=_check_positions)
    tenure: int | None = _tenure()
    #: 3 without ``tenure``, 8 with it (the default follows ``tenure``)
    version: int = _tenure_version("a HeartbeatingTask", 3, 8)

    def __attrs_post_init__(self) -> None:
        _check_tenure_version(self, 3, 8)

    @property
    def last_offset(self) -> int:
        """The scalar position the world records for the key (:func:`task_last_offset`)."""
        return task_last_offset(self.positions)


@attrs.frozen(kw_only=True)
class ReleasingTask:
    """Version 3: the holder gives a task up cleanly, recording every source's final
    position. Judged by rule 6 exactly like a :class:`ReleasingPartition`; version 6 names
    the ``tenure`` it ends, as a version 6 ReleasingPartition does."""

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    topic: str = attrs.field(validator=_check_topic)
    partition: int = attrs.field(validator=_check_partition)
    positions: Positions = attrs.field(validator=_check_positions)
    tenure: int | None = _tenure()
    #: 3 without ``tenure``, 6 with it (the default follows ``tenure``)
    version: int = _tenure_version("a ReleasingTask", 3, 6)

    def __attrs_post_init__(self) -> None:
        _check_tenure_version(self, 3, 6)

    @property
    def last_offset(self) -> int:
        """The scalar position the world records for the key (:func:`task_last_offset`)."""
        return task_last_offset(self.positions)


#: One partition of a :class:`MemberHeartbeat`: ``(topic, partition, tenure, last_offset)``.
BeatEntry = tuple[str, int, int, int]


def _check_beat_entries(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    ok = type(value) is tuple and 1 <= len(value) <= MAX_BEAT_ENTRIES
    previous: tuple[str, int] | None = None
    for item in cast("tuple[object, ...]", value) if ok else ():  # (a tuple when ok)
        if not (
            type(item) is tuple
            and len(item) == 4
            # (a record's entries are mostly of one topic: checked once, then the same str)
            and ((previous is not None and item[0] is previous[0]) or valid_topic(item[0]))
            and _is_int(item[1])
            and 0 <= item[1] <= MAX_PARTITION
            and _is_int(item[2])
            and 0 <= item[2] <= MAX_OFFSET
            and _is_int(item[3])
            and -1 <= item[3] <= MAX_OFFSET
            and (previous is None or previous < (item[0], item[1]))
        ):
            ok = False
            break
        previous = (item[0], item[1])
    if not ok:
        raise ValueError(
            f"{attribute.name} must be a tuple of 1..{MAX_BEAT_ENTRIES} (topic, partition, "
            f"tenure, last_offset) entries strictly ascending by (topic, partition), tenure in "
            f"[0, {MAX_OFFSET}], last_offset in [-1, {MAX_OFFSET}], got {value!r}"
        )


@attrs.frozen(kw_only=True)
class MemberHeartbeat:
    """Version 7: one member's heartbeat of every partition it holds in one coordination
    partition (PROTOCOL.md, "Version 7"). Each entry ``(topic, partition, tenure,
    last_offset)`` is judged as a :class:`Heartbeat` of that partition would be (rule 5,
    property g; a newer instance's of the holder's client is a restart takeover), and only
    in the tenure it names (property h: the offset of the claim or restart takeover that
    began it). Its verdict is one per entry (``Verdict.entries``)."""

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    heartbeat_interval_ms: int = _heartbeat_interval()
    entries: tuple[BeatEntry, ...] = attrs.field(validator=_check_beat_entries)
    version: int = _version_field(7, "a MemberHeartbeat")


@attrs.frozen(kw_only=True)
class NamingTenure:
    """Version 9: the holder of a tenure without a name names it (PROTOCOL.md, "Version 9",
    property j). A tenure begun by a claim of version 1 or 5, or by a restart takeover of
    such a tenure, has no name, so its holder could only heartbeat it one record per
    partition and its late writes could not be told by their tenure. Accepted from that
    holder (``NAMED``), the tenure is named by this record's offset; nothing else changes.
    From anyone else, or in a named tenure, ``NOT_HOLDER``."""

    client_id: str = _id()
    instance_id: str = _id()
    group_id: str = _id()
    topic: str = attrs.field(validator=_check_topic)
    partition: int = attrs.field(validator=_check_partition)
    version: int = _version_field(9, "a NamingTenure")


Message = (
    Heartbeat
    | ClaimingPartition
    | ReleasingPartition
    | ClaimingMessages
    | ReleaseGroup
    | AnnouncingMember
    | LeavingGroup
    | HeartbeatingTask
    | ReleasingTask
    | MemberHeartbeat
    | NamingTenure
)

#: The name of each message type where a person or a table reads it: the ``type`` of
#: ``logmarshal coord dump`` (docs/admin.md) and the audit's ``message_type`` column. The
#: class name in snake case; a message type added here is named everywhere at once.
MESSAGE_NAMES: Mapping[type, str] = MappingProxyType(
    {
        Heartbeat: "heartbeat",
        ClaimingPartition: "claiming_partition",
        ReleasingPartition: "releasing_partition",
        ClaimingMessages: "claiming_messages",
        ReleaseGroup: "release_group",
        AnnouncingMember: "announcing_member",
        LeavingGroup: "leaving_group",
        HeartbeatingTask: "heartbeating_task",
        ReleasingTask: "releasing_task",
        MemberHeartbeat: "member_heartbeat",
        NamingTenure: "naming_tenure",
    }
)
