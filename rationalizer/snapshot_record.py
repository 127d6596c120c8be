"""Published snapshots: a WorldState snapshot as a record of the snapshot topic.

PROTOCOL.md, "Published snapshots", is the byte-level specification. A record carries the
canonical ``WorldState`` bytes of one coordination partition, the offset they cover, their
SHA-256 digest, the names of the groups the world was replayed with an admin key for, and one
HMAC tag per such group made with *that group's* key. So a reader holding group A's key
checks A's tag only, B's key never verifies A's tag (the group name is inside every tag's
input), and a world replayed under other key configuration (which can give other verdicts)
is never restored. Pure: no I/O, like the rest of the rationalizer.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from itertools import pairwise

import attrs

from .auth import validate_admin_keys
from .messages import MAX_ID_BYTES, MAX_OFFSET, valid_id
from .snapshot import SnapshotError
from .varint import append_uvarint as _uv
from .varint import read_uvarint
from .world import WorldState

__all__ = [
    "RECORD_MAGIC",
    "RECORD_VERSION",
    "PublishedSnapshot",
    "encode_snapshot_record",
    "fingerprint",
    "parse_snapshot_record",
    "restore_snapshot",
    "snapshot_key",
]

RECORD_MAGIC = b"LMSR"
RECORD_VERSION = 1
_DIGEST = 32
_TAG = 32
_TAG_DOMAIN = b"logmarshal snapshot tag v1\x00"
_MAX_PARTITION = 2**31 - 1


def fingerprint(keyed_groups: object) -> str:
    """Short stable name of a key configuration (the sorted keyed group names, not keys).

    Writers with different configurations publish under different record keys, so a
    compacted snapshot topic keeps the newest snapshot of each."""
    names = sorted(keyed_groups)  # type: ignore[call-overload]
    if not names:
        return "-"
    h = hashlib.sha256()
    for name in names:
        b = name.encode("utf-8")
        h.update(len(b).to_bytes(4, "big") + b)
    return h.hexdigest()[:16]


def snapshot_key(coord_partition: int, keyed_groups: object) -> bytes:
    """Record key: ``<coordination partition>/<fingerprint>`` in ASCII."""
    return f"{coord_partition}/{fingerprint(keyed_groups)}".encode("ascii")


@attrs.frozen
class PublishedSnapshot:
    """A parsed snapshot record; nothing in it is trusted until :func:`restore_snapshot`."""

    coord_partition: int
    covered: int  # the world's applied_through: the tail starts at covered + 1
    digest: bytes
    tags: tuple[tuple[str, bytes], ...]  # (group, tag), sorted by group, unique
    world: bytes

    @property
    def keyed_groups(self) -> tuple[str, ...]:
        return tuple(g for g, _ in self.tags)


def _header(cp: int, covered: int, digest: bytes, groups: list[str]) -> bytearray:
    out = bytearray(RECORD_MAGIC)
    out.append(RECORD_VERSION)
    _uv(out, cp)
    _uv(out, covered + 1)
    out += digest
    _uv(out, len(groups))
    return out


def _tag(key: bytes, group: str, signed: bytes) -> bytes:
    g = group.encode("utf-8")
    msg = _TAG_DOMAIN + len(g).to_bytes(2, "big") + g + signed
    return hmac.new(key, msg, hashlib.sha256).digest()


def _signed_part(cp: int, covered: int, digest: bytes, groups: list[str]) -> bytes:
    """What every tag covers: the header with the keyed group names (not the tags)."""
    out = _header(cp, covered, digest, groups)
    for g in groups:
        b = g.encode("utf-8")
        _uv(out, len(b))
        out += b
    return bytes(out)


def encode_snapshot_record(
    world: WorldState,
    coord_partition: int,
    admin_keys: Mapping[str, bytes] | None = None,
) -> tuple[bytes, bytes]:
    """``(key, value)`` publishing ``world`` (replayed with ``admin_keys``) for a partition."""
    if type(coord_partition) is not int or not 0 <= coord_partition <= _MAX_PARTITION:
        raise ValueError(f"bad coordination partition {coord_partition!r}")
    keys = validate_admin_keys(admin_keys)
    data = world.to_bytes()
    covered = world.applied_through
    digest = hashlib.sha256(data).digest()
    groups = sorted(keys)
    signed = _signed_part(coord_partition, covered, digest, groups)
    out = _header(coord_partition, covered, digest, groups)
    for g in groups:
        b = g.encode("utf-8")
        _uv(out, len(b))
        out += b
        out += _tag(keys[g], g, signed)
    _uv(out, len(data))
    out += data
    return snapshot_key(coord_partition, groups), bytes(out)


class _R:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise SnapshotError("truncated snapshot record")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def uv(self, limit: int) -> int:
        n, self.pos = read_uvarint(
            self.buf, self.pos, limit, "snapshot record number", SnapshotError
        )
        return n


def parse_snapshot_record(key: bytes | None, value: bytes | None) -> PublishedSnapshot:
    """Parse (strictly) without trusting: raises ``SnapshotError`` on any malformation."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise SnapshotError("snapshot record without a value")
    r = _R(bytes(value))
    if r.take(4) != RECORD_MAGIC:
        raise SnapshotError("not a snapshot record (bad magic)")
    version = r.take(1)[0]
    if version != RECORD_VERSION:
        raise SnapshotError(f"unsupported snapshot record version {version}")
    cp = r.uv(_MAX_PARTITION)
    covered = r.uv(MAX_OFFSET + 1) - 1
    digest = r.take(_DIGEST)
    tags = []
    for _ in range(r.uv(1 << 20)):
        n = r.uv(MAX_ID_BYTES)
        try:
            group = r.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise SnapshotError("invalid UTF-8 group in snapshot record") from None
        if not valid_id(group):
            raise SnapshotError("invalid group in snapshot record")
        tags.append((group, r.take(_TAG)))
    names = [g for g, _ in tags]
    if any(a >= b for a, b in pairwise(names)):
        raise SnapshotError("snapshot record groups not strictly sorted")
    size = r.uv(1 << 40)
    world = r.take(size)
    if r.pos != len(r.buf):
        raise SnapshotError("trailing bytes in snapshot record")
    if key is not None and bytes(key) != snapshot_key(cp, names):
        raise SnapshotError("snapshot record key does not match its value")
    return PublishedSnapshot(cp, covered, digest, tuple(tags), world)


def restore_snapshot(
    snap: PublishedSnapshot,
    coord_partition: int,
    admin_keys: Mapping[str, bytes] | None = None,
) -> WorldState:
    """The world of ``snap`` if it is valid for a replayer of ``coord_partition`` configured
    with ``admin_keys``; else ``SnapshotError`` saying why (digest, configuration, tag,
    decode). Tags are compared in constant time; a missing tag is a refusal."""
    keys = validate_admin_keys(admin_keys)
    if snap.coord_partition != coord_partition:
        raise SnapshotError(
            f"snapshot of coordination partition {snap.coord_partition}, not {coord_partition}"
        )
    if not hmac.compare_digest(hashlib.sha256(snap.world).digest(), snap.digest):
        raise SnapshotError("snapshot digest mismatch")
    names = list(snap.keyed_groups)
    if names != sorted(keys):
        raise SnapshotError(
            "snapshot replayed with admin keys for other groups than this replayer's"
        )
    signed = _signed_part(snap.coord_partition, snap.covered, snap.digest, names)
    for group, tag in snap.tags:
        if not hmac.compare_digest(_tag(keys[group], group, signed), tag):
            raise SnapshotError(f"snapshot tag of group {group!r} does not verify")
    world = WorldState.from_bytes(snap.world, admin_keys=keys)
    if world.applied_through != snap.covered:
        raise SnapshotError("snapshot covers another offset than its world")
    return world
