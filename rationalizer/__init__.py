"""The rationalizer: coordination messages, their codec and the deterministic replay.

Pure: imports attrs and mmh3 only (plus the stdlib's hmac/hashlib for authenticated admin
records); no I/O, no clock, no threads. The same code runs in
every consumer, the admin CLI and the Spark audit, which is what makes them agree.
"""

from .auth import MIN_KEY_BYTES, sign, verify
from .codec import DecodeError, UnknownVersion, decode, encode, record_key
from .group_view import GroupView
from .messages import (
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
    Message,
    ReleaseGroup,
    ReleasingPartition,
    ReleasingTask,
)
from .partitioning import coordination_partition, membership_partition
from .snapshot import SnapshotError
from .verdict import Effect, Reason, Verdict
from .world import FRESH, STALE, UNKNOWN, Claim, PartitionState, WorldState

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
    "Message",
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
