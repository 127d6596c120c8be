"""The rationalizer: coordination messages, their codec and the deterministic replay.

Pure: imports attrs and mmh3 only (plus the stdlib's hmac/hashlib for authenticated admin
records); no I/O, no clock, no threads. The same code runs in
every consumer, the admin CLI and the Spark audit, which is what makes them agree.
"""

from ._auth import MIN_KEY_BYTES, sign, verify
from ._codec import DecodeError, UnknownVersion, encode, record_key
from ._decode import decode
from ._group_view import GroupView
from ._messages import (
    ANNOUNCED_VERSION,
    MAX_HEARTBEAT_INTERVAL_MS,
    MAX_TASK_SOURCES,
    MESSAGE_NAMES,
    PROTOCOL_VERSION,
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
from ._partitioning import coordination_partition, membership_partition
from ._snapshot import SnapshotError
from ._verdict import Effect, Reason, Verdict
from ._world import FRESH, STALE, UNKNOWN, Claim, PartitionState, WorldState

__all__ = [
    "ANNOUNCED_VERSION",
    "FRESH",
    "MAX_HEARTBEAT_INTERVAL_MS",
    "MAX_TASK_SOURCES",
    "MESSAGE_NAMES",
    "MIN_KEY_BYTES",
    "PROTOCOL_VERSION",
    "STALE",
    "UNKNOWN",
    "AnnouncingMember",
    "Claim",
    "ClaimingMessages",
    "ClaimingPartition",
    "DecodeError",
    "Effect",
    "GroupView",
    "Heartbeat",
    "HeartbeatingTask",
    "LeavingGroup",
    "MemberHeartbeat",
    "Message",
    "NamingTenure",
    "PartitionState",
    "Reason",
    "ReleaseGroup",
    "ReleasingPartition",
    "ReleasingTask",
    "SnapshotError",
    "UnknownVersion",
    "Verdict",
    "WorldState",
    "coordination_partition",
    "decode",
    "encode",
    "membership_partition",
    "record_key",
    "sign",
    "verify",
]
