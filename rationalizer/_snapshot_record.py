"""Published snapshots: a WorldState snapshot as a record of the snapshot topic.

PROTOCOL.md, "Bounded coordination log", is the byte-level specification. A record carries
the protocol version whose rules its publisher replayed with (record version 2; a version 1
record does not say), the canonical ``WorldState`` bytes of one coordination partition, the
offset they cover, their SHA-256 digest, the names of the groups the world was replayed with
an admin key for, and one HMAC tag per such group made with *that group's* key. So a reader
holding group A's key checks A's tag only, B's key never verifies A's tag (the group name is
inside every tag's input), and a world replayed under another key configuration or other
rules (either can give other verdicts) is never restored.

The same topic carries *announcements* (:func:`encode_announcement`): a replayer says which
configuration (key configuration and rules) it replays a coordination partition with, so
that a truncator keeps what that configuration still needs even before it published a
snapshot. Pure: no I/O, like the rest of the rationalizer.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from itertools import pairwise

import attrs

from ._auth import validate_admin_keys
from ._messages import MAX_ID_BYTES, MAX_OFFSET, PROTOCOL_VERSION, valid_id
from ._snapshot import SnapshotError
from ._varint import append_uvarint as _uv
from ._varint import read_uvarint
from ._world import WorldState

__all__ = [
    "ANNOUNCEMENT_MAGIC",
    "RECORD_MAGIC",
    "RECORD_VERSION",
    "Announcement",
    "PublishedSnapshot",
    "announcement_key",
    "config_fingerprint",
    "encode_announcement",
    "encode_snapshot_record",
    "fingerprint",
    "is_announcement_key",
    "parse_announcement",
    "parse_snapshot_record",
    "restore_snapshot",
    "snapshot_key",
]

RECORD_MAGIC = b"LMSR"
#: version 2 names the publisher's rules (protocol version); version 1 (read, never written
#: by default) does not: its rules are unknown, so no replayer restores it
RECORD_VERSION = 2
_V1 = 1
ANNOUNCEMENT_MAGIC = b"LMCA"
_ANNOUNCEMENT_VERSION = 1
_LIVE = "/live"
_MAX_MS = 2**63 - 1
_DIGEST = 32
_TAG = 32
_TAG_DOMAIN = b"logmarshal snapshot tag v1\x00"
_MAX_PARTITION = 2**31 - 1


def fingerprint(keyed_groups: object) -> str:
    """Short stable name of a key configuration (the sorted keyed group names, not keys).

    Writers with different configurations publish under different record keys, so a
    compacted snapshot topic keeps the newest snapshot of each."""
    names = sorted(keyed_groups)  # type: ignore[call-overload]  # any iterable of group ids (a dict of keys too)
    if not names:
        return "-"
    h = hashlib.sha256()
    for name in names:
        b = name.encode("utf-8")
        h.update(len(b).to_bytes(4, "big") + b)
    return h.hexdigest()[:16]


def config_fingerprint(keyed_groups: object, rules: int | None) -> str:
    """Name of a replay configuration: the key configuration and the rules (protocol
    version) it replays with, ``<fingerprint>@<rules>`` (``-@5``). ``rules=None`` (a record
    version 1 snapshot, whose rules are unknown) names the key configuration alone."""
    fp = fingerprint(keyed_groups)
    return fp if rules is None else f"{fp}@{_rules(rules)}"


def snapshot_key(
    coord_partition: int, keyed_groups: object, rules: int | None = PROTOCOL_VERSION
) -> bytes:
    """Record key: ``<coordination partition>/<configuration>`` in ASCII
    (:func:`config_fingerprint`; ``rules=None``: a record version 1 key)."""
    return f"{coord_partition}/{config_fingerprint(keyed_groups, rules)}".encode("ascii")


def announcement_key(coord_partition: int, keyed_groups: object, rules: int) -> bytes:
    """Key of an announcement: ``<coordination partition>/<configuration>/live``."""
    return snapshot_key(coord_partition, keyed_groups, rules) + _LIVE.encode("ascii")


def is_announcement_key(key: bytes | None) -> bool:
    """Does this snapshot-topic key name an announcement (not a snapshot)?"""
    return key is not None and bytes(key).endswith(b"/live")


def _rules(rules: object) -> int:
    if type(rules) is not int or not 1 <= rules <= 255:
        raise ValueError(f"bad rules version {rules!r} (1..255)")
    return rules


@attrs.frozen
class PublishedSnapshot:
    """A parsed snapshot record; nothing in it is trusted until :func:`restore_snapshot`."""

    coord_partition: int
    covered: int  # the world's applied_through: the tail starts at covered + 1
    digest: bytes
    tags: tuple[tuple[str, bytes], ...]  # (group, tag), sorted by group, unique
    world: bytes
    #: the protocol version whose rules the publisher replayed with; None: a record
    #: version 1 snapshot, which does not say (published by a replayer of version 5 or
    #: older)
    rules: int | None = None

    @property
    def keyed_groups(self) -> tuple[str, ...]:
        return tuple(g for g, _ in self.tags)

    @property
    def config(self) -> str:
        """Its replay configuration (:func:`config_fingerprint`): whose snapshot it is."""
        return config_fingerprint(self.keyed_groups, self.rules)


def _header(
    cp: int, covered: int, digest: bytes, groups: list[str], rules: int | None
) -> bytearray:
    out = bytearray(RECORD_MAGIC)
    if rules is None:
        out.append(_V1)
    else:
        out.append(RECORD_VERSION)
        out.append(rules)
    _uv(out, cp)
    _uv(out, covered + 1)
    out += digest
    _uv(out, len(groups))
    return out


def _tag(key: bytes, group: str, signed: bytes) -> bytes:
    g = group.encode("utf-8")
    msg = _TAG_DOMAIN + len(g).to_bytes(2, "big") + g + signed
    return hmac.new(key, msg, hashlib.sha256).digest()


def _signed_part(
    cp: int, covered: int, digest: bytes, groups: list[str], rules: int | None
) -> bytes:
    """What every tag covers: the header (with the rules) and the keyed group names (not
    the tags)."""
    out = _header(cp, covered, digest, groups, rules)
    for g in groups:
        b = g.encode("utf-8")
        _uv(out, len(b))
        out += b
    return bytes(out)


def encode_snapshot_record(
    world: WorldState,
    coord_partition: int,
    admin_keys: Mapping[str, bytes] | None = None,
    *,
    rules: int | None = PROTOCOL_VERSION,
) -> tuple[bytes, bytes]:
    """``(key, value)`` publishing ``world`` (replayed with ``admin_keys`` under the rules
    of protocol version ``rules``: this code's own by default) for a partition.
    ``rules=None`` writes a record version 1 (no rules), as replayers of version 5 did."""
    if type(coord_partition) is not int or not 0 <= coord_partition <= _MAX_PARTITION:
        raise ValueError(f"bad coordination partition {coord_partition!r}")
    if rules is not None:
        _rules(rules)
    keys = validate_admin_keys(admin_keys)
    data = world.to_bytes()
    covered = world.applied_through
    digest = hashlib.sha256(data).digest()
    groups = sorted(keys)
    signed = _signed_part(coord_partition, covered, digest, groups, rules)
    out = _header(coord_partition, covered, digest, groups, rules)
    for g in groups:
        b = g.encode("utf-8")
        _uv(out, len(b))
        out += b
        out += _tag(keys[g], g, signed)
    _uv(out, len(data))
    out += data
    return snapshot_key(coord_partition, groups, rules), bytes(out)


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
    rules: int | None = None
    if version == RECORD_VERSION:
        rules = r.take(1)[0]
        if rules == 0:
            raise SnapshotError("snapshot record of rules version 0")
    elif version != _V1:
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
    if key is not None and bytes(key) != snapshot_key(cp, names, rules):
        raise SnapshotError("snapshot record key does not match its value")
    return PublishedSnapshot(cp, covered, digest, tuple(tags), world, rules)


def restore_snapshot(
    snap: PublishedSnapshot,
    coord_partition: int,
    admin_keys: Mapping[str, bytes] | None = None,
    *,
    rules: int = PROTOCOL_VERSION,
) -> WorldState:
    """The world of ``snap`` if it is valid for a replayer of ``coord_partition`` configured
    with ``admin_keys`` that applies the rules of protocol version ``rules`` (this code's
    own by default); else ``SnapshotError`` saying why (partition, rules, digest,
    configuration, tag, decode). A snapshot whose rules are unknown (record version 1) or
    other is refused: a world folded under other rules can judge the next records
    otherwise. Tags are compared in constant time; a missing tag is a refusal."""
    keys = validate_admin_keys(admin_keys)
    if snap.coord_partition != coord_partition:
        raise SnapshotError(
            f"snapshot of coordination partition {snap.coord_partition}, not {coord_partition}"
        )
    if snap.rules != rules:
        said = (
            "unknown rules (record version 1)"
            if snap.rules is None
            else (f"the rules of protocol version {snap.rules}")
        )
        raise SnapshotError(f"snapshot replayed under {said}, not version {rules}'s")
    if not hmac.compare_digest(hashlib.sha256(snap.world).digest(), snap.digest):
        raise SnapshotError("snapshot digest mismatch")
    names = list(snap.keyed_groups)
    if names != sorted(keys):
        raise SnapshotError(
            "snapshot replayed with admin keys for other groups than this replayer's"
        )
    signed = _signed_part(snap.coord_partition, snap.covered, snap.digest, names, snap.rules)
    for group, tag in snap.tags:
        if not hmac.compare_digest(_tag(keys[group], group, signed), tag):
            raise SnapshotError(f"snapshot tag of group {group!r} does not verify")
    world = WorldState.from_bytes(snap.world, admin_keys=keys)
    if world.applied_through != snap.covered:
        raise SnapshotError("snapshot covers another offset than its world")
    return world


# ------------------------------------------------------------------------ announcements


@attrs.frozen
class Announcement:
    """A replayer's word that its configuration replays ``coord_partition`` until
    ``expires_ms`` (its own wall clock, not log time: a truncator compares it with its
    own). Nothing in it is trusted beyond keeping records longer."""

    coord_partition: int
    rules: int
    keyed_groups: tuple[str, ...]
    written_ms: int
    expires_ms: int

    @property
    def config(self) -> str:
        return config_fingerprint(self.keyed_groups, self.rules)


def encode_announcement(
    coord_partition: int,
    keyed_groups: object,
    *,
    written_ms: int,
    expires_ms: int,
    rules: int = PROTOCOL_VERSION,
) -> tuple[bytes, bytes]:
    """``(key, value)`` of an announcement: magic ``LMCA``, version 1, rules, cp, the keyed
    group names (sorted), written and expiry wall times in ms (varints)."""
    if type(coord_partition) is not int or not 0 <= coord_partition <= _MAX_PARTITION:
        raise ValueError(f"bad coordination partition {coord_partition!r}")
    _rules(rules)
    if not 0 <= written_ms <= expires_ms <= _MAX_MS:
        raise ValueError(f"bad announcement times {written_ms!r}..{expires_ms!r}")
    groups = sorted(keyed_groups)  # type: ignore[call-overload]  # any iterable of group ids (a dict of keys too)
    out = bytearray(ANNOUNCEMENT_MAGIC)
    out.append(_ANNOUNCEMENT_VERSION)
    out.append(rules)
    _uv(out, coord_partition)
    _uv(out, len(groups))
    for g in groups:
        if not valid_id(g):
            raise ValueError(f"invalid group {g!r}")
        b = g.encode("utf-8")
        _uv(out, len(b))
        out += b
    _uv(out, written_ms)
    _uv(out, expires_ms)
    return announcement_key(coord_partition, groups, rules), bytes(out)


def parse_announcement(key: bytes | None, value: bytes | None) -> Announcement:
    """Parse (strictly): ``SnapshotError`` on any malformation or a key that does not
    match the value."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise SnapshotError("announcement without a value")
    r = _R(bytes(value))
    if r.take(4) != ANNOUNCEMENT_MAGIC:
        raise SnapshotError("not an announcement (bad magic)")
    version = r.take(1)[0]
    if version != _ANNOUNCEMENT_VERSION:
        raise SnapshotError(f"unsupported announcement version {version}")
    rules = r.take(1)[0]
    if rules == 0:
        raise SnapshotError("announcement of rules version 0")
    cp = r.uv(_MAX_PARTITION)
    names = []
    for _ in range(r.uv(1 << 20)):
        try:
            group = r.take(r.uv(MAX_ID_BYTES)).decode("utf-8")
        except UnicodeDecodeError:
            raise SnapshotError("invalid UTF-8 group in announcement") from None
        if not valid_id(group):
            raise SnapshotError("invalid group in announcement")
        names.append(group)
    if any(a >= b for a, b in pairwise(names)):
        raise SnapshotError("announcement groups not strictly sorted")
    written = r.uv(_MAX_MS)
    expires = r.uv(_MAX_MS)
    if expires < written:
        raise SnapshotError("announcement expires before it was written")
    if r.pos != len(r.buf):
        raise SnapshotError("trailing bytes in announcement")
    if key is None or bytes(key) != announcement_key(cp, names, rules):
        raise SnapshotError("announcement key does not match its value")
    return Announcement(cp, rules, tuple(names), written, expires)
