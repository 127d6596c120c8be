"""The replay's identity cache and its lanes (``WorldState.apply_many``'s fast paths).

Most records of a coordination log repeat an identity part accepted before: the same ids,
topic and partition (the same bytes in the four version 1 partition types, in a task
record and in a version 4 or 6 record, after their own header). :class:`Identity` is what
the replay keeps per such identity part, and :class:`IdentityCache` finds it again by the
record's key or by the bytes, so that a record is judged without the strict decoder
(``codec.decode_fields`` stays the single source of truth for what is a valid record: the
cache only ever reuses what it accepted before, and whatever is unusual goes to the strict
decoder in ``WorldState._slow``).

Three lanes read a record without the decoder: the heartbeat lane (inline in
``apply_many``: the key's last heartbeat again, only the position new), the task lane and
the version 1 fast path (:meth:`IdentityCache.read`).
"""

from __future__ import annotations

from collections.abc import Mapping
from struct import Struct
from typing import Any
from zlib import crc32

from ._codec import (
    T_CLAIMING_MESSAGES,
    T_CLAIMING_PARTITION,
    T_HEARTBEAT,
    T_HEARTBEATING_TASK,
    T_RELEASING_PARTITION,
    T_RELEASING_TASK,
    VERSION_1,
    VERSION_3,
    VERSION_8,
    DecodeError,
    _str,
    record_key,
)
from ._messages import MAX_HEARTBEAT_INTERVAL_MS, MAX_PARTITION, valid_topic
from ._rules import T_TASK_BEAT_V8
from ._state import PartitionEntry, Sender, fence_key
from ._task_vectors import Layout
from ._varint import read_uvarint

__all__ = ["NO_IDENTITY", "Decoded", "Identity", "IdentityCache"]

#: At this many identity parts the caches start anew (a bound on a replay's memory).
CACHE_LIMIT = 1 << 17

_I64 = Struct(">q")
_U32 = Struct(">I")
_HB_HEAD = Struct(">qIB")  # Heartbeat: last_offset, heartbeat_interval_ms, tag length
_HB_TENURE = Struct(">Iq")  # a version 8 HeartbeatingTask: heartbeat_interval_ms, tenure
#: the envelope's check runs over version and type, then everything after the check
#: (``codec.seal``): these two bytes' share of it
_V8_TASK_HEAD_CRC = crc32(bytes((VERSION_8, T_HEARTBEATING_TASK)))
_NUMBERED_TYPES = frozenset({T_RELEASING_PARTITION, T_CLAIMING_MESSAGES})


class Identity:
    """What the replay knows of one identity part (one sender on one partition key).

    ``admin_ok``: the record may act as the pausing admin (the group has no key, or the
    record is validly tagged; tagged records are never cached). ``ident``: the identity
    part's bytes and ``size`` their length; ``b""`` and -1 when it is not cached. The
    heartbeat lane's fields describe the key's last heartbeat from this sender: its length
    (``beat_size``, -1 before any), its bytes after the int64 position (``beat_tail``,
    ``b""`` before any) and its lease (``beat_hb``); ``layout`` is the layout of the vector
    of its last task record (``vectors.learn``), None before any.
    """

    __slots__ = (
        "admin_ok",
        "beat_hb",
        "beat_size",
        "beat_tail",
        "fkey",
        "group",
        "ident",
        "key",
        "layout",
        "part",
        "partition",
        "sender",
        "size",
        "topic",
    )

    def __init__(
        self,
        key: bytes,
        sender: Sender,
        fkey: str,
        group: str,
        part: PartitionEntry | None,
        topic: str,
        partition: int,
        admin_ok: bool,
        ident: bytes = b"",
    ) -> None:
        self.key = key  # the canonical record key
        self.sender = sender
        self.fkey = fkey  # the sender's fence key
        self.group = group
        self.part = part  # the partition's state, once there is some
        self.topic = topic
        self.partition = partition
        self.admin_ok = admin_ok
        self.size = len(ident) if ident else -1
        self.ident = ident
        self.beat_size = -1
        self.beat_tail = b""
        self.beat_hb = 0
        self.layout: Layout | None = None


#: What the key cache answers for an unknown key: an identity no value can match.
NO_IDENTITY = Identity(b"", ("", ""), "", "", None, "", -1, False)

#: A record read without a verdict yet: its identity, type code (``rules.Transition``), its
#: number, its lease and what else its type carries (see ``rules.Transition``).
Decoded = tuple[Identity, int, int, int, Any]


class IdentityCache:
    """The identity parts a world accepted, by their bytes and by their record key.

    ``by_bytes``: identity part -> its :class:`Identity`; ``by_key``: record key -> the
    identity last used with it; ``senders``: the three ids (with their length bytes) ->
    ``(sender, fence key, group, admin_ok)``; ``topics``: a topic (with its length byte) ->
    the topic; ``layouts``: task name -> the layout by sources of its last strictly decoded
    vector (the first task record of a key tries it: a task's partitions have the same
    sources). ``parts`` and ``keyed`` are the world's partitions and its keyed groups.
    """

    __slots__ = (
        "by_bytes",
        "by_key",
        "groups",
        "keyed",
        "layouts",
        "parts",
        "senders",
        "topics",
    )

    def __init__(self, parts: dict[bytes, PartitionEntry], keyed: Mapping[str, bytes]) -> None:
        self.parts = parts
        self.keyed = keyed
        self.by_bytes: dict[bytes, Identity] = {}
        self.by_key: dict[bytes, Identity] = {}
        self.senders: dict[bytes, tuple[Sender, str, str, bool]] = {}
        self.topics: dict[bytes, str] = {}
        self.layouts: dict[str, Layout] = {}
        #: a group id -> its bytes as a record writes it (length, then UTF-8): the envelope
        #: of a version 8 task heartbeat in the task lane
        self.groups: dict[str, bytes] = {}

    def put(self, ident_bytes: bytes, key: bytes, ent: Identity) -> None:
        """Cache ``ent`` by its identity part and its key (starting anew at the limit)."""
        by_bytes = self.by_bytes
        if len(by_bytes) >= CACHE_LIMIT:
            by_bytes.clear()
            self.by_key.clear()
            self.senders.clear()
            self.topics.clear()
            self.layouts.clear()
            self.groups.clear()
        by_bytes[ident_bytes] = ent
        by_key = self.by_key
        if ent.layout is None and (prev := by_key.get(key)) is not None:
            ent.layout = prev.layout  # the key's vector layout: the task lane tries it first
        by_key[key] = ent

    def read(self, key: Any, value: Any, ent: Identity) -> Decoded | None:
        """A record the heartbeat lane did not take, read by the task lane (:meth:`_task`)
        or the version 1 fast path with ``ent``, what the key cache gave for ``key``; None:
        the strict decoder decides (``WorldState._slow``). (Any key and value: what is not
        bytes goes to the strict decoder.)

        The version 1 fast path checks the fixed-width header exactly as decode would, then
        finds the identity part (ids, topic, partition) accepted before for this key: by the
        key (checked with endswith, no copy), else by its bytes, else parses it
        (:meth:`miss`, strict; the strict decoder if in doubt)."""
        if value.__class__ is not bytes:
            return None
        lay = ent.layout
        if (
            lay is not None or (self.layouts and (lay := self.layouts.get(ent.topic)) is not None)
        ) and len(value) > 6:
            if value[0] == VERSION_3:
                return self._task(key, value, ent, lay)
            if value[0] == VERSION_8:
                return self._task8(key, value, ent, lay)
        if key.__class__ is not bytes or len(value) < 15 or value[0] != VERSION_1:
            return None
        typ = value[1]
        if typ == T_HEARTBEAT:
            num, hb, tagged = _HB_HEAD.unpack_from(value, 2)
            if tagged or num < -1 or not 0 < hb <= MAX_HEARTBEAT_INTERVAL_MS:
                return None
            hl = 15
        elif typ == T_CLAIMING_PARTITION:
            num = 0
            hb = _U32.unpack_from(value, 2)[0]
            if not 0 < hb <= MAX_HEARTBEAT_INTERVAL_MS:
                return None
            hl = 6
        elif typ in _NUMBERED_TYPES:
            hb = 0
            num = _I64.unpack_from(value, 2)[0]
            if num < -1:
                return None
            hl = 10
        else:
            return None
        if ent.size != len(value) - hl or not value.endswith(ent.ident):  # (NO_IDENTITY: -1)
            cached = self.by_bytes.get(value[hl:])
            if cached is None:
                cached = self.miss(key, value, hl)
                if cached is None:
                    return None
            elif cached.key == key:
                self.by_key[key] = cached
                if cached.layout is None:
                    cached.layout = ent.layout  # (the key's vector layout, for the task lane)
            else:
                return None
            ent = cached
        if typ == T_HEARTBEAT:
            # open the lane for this sender's next heartbeats
            ent.beat_size = len(value)
            ent.beat_tail = value[10:]
            ent.beat_hb = hb
        return ent, typ, num, hb, None

    def _task(self, key: Any, value: bytes, ent: Identity, lay: Layout) -> Decoded | None:
        """Task lane (PROTOCOL.md, "Tasks (version 3)"): a HeartbeatingTask or ReleasingTask
        on a key whose last task record was decoded (by anyone), or the first of a key of a
        task decoded before: the header is checked here as decode would, the vector read by
        that record's layout (the same sources; see vectors.py), the identity part after it
        found as for the version 1 types; the rules judge it as always."""
        typ = value[1]
        if typ == T_HEARTBEATING_TASK:
            hl = 6
            hb = _U32.unpack_from(value, 2)[0]
            if not 0 < hb <= MAX_HEARTBEAT_INTERVAL_MS:
                return None
        elif typ == T_RELEASING_TASK:
            hl = 2
            hb = 0
        else:
            return None
        if len(value) <= hl + lay[0]:
            return None
        got = lay[1](lay, value, hl)
        if got is None:
            return None
        vector, num, end = got
        sender = self._sender(key, value, ent, end)
        if sender is None:
            return None
        sender.layout = lay
        return sender, typ, num, hb, vector

    def _sender(self, key: Any, value: bytes, ent: Identity, end: int) -> Identity | None:
        """The identity of a task record whose identity part starts at ``end``: the key's
        last (``ent``) if it is byte for byte that, else another sender's on this key (a
        claim's winner, a restart: :meth:`other_sender`); None: the decoder decides."""
        if len(value) - ent.size != end or not value.endswith(ent.ident):
            return self.other_sender(key, value, end)
        return ent

    def _task8(self, key: Any, value: bytes, ent: Identity, lay: Layout) -> Decoded | None:
        """Task lane for a version 8 HeartbeatingTask (PROTOCOL.md, "Version 8"): the
        envelope's group is the key's (its bytes as the identity part holds them), the
        interval and the tenure in range, the vector read by the key's layout, the identity
        part found as in :meth:`_task`, and the envelope's check computed as decode
        computes it; anything else goes to the strict decoder. The rules judge it by
        property i."""
        if value[1] != T_HEARTBEATING_TASK:
            return None
        group = self.groups.get(ent.group)
        if group is None:
            group = self.groups[ent.group] = _str(ent.group)  # (as the encoder writes it)
        if not value.startswith(group, 6):
            return None
        at = 6 + len(group)
        if len(value) <= at + 12 + lay[0]:
            return None
        hb, tenure = _HB_TENURE.unpack_from(value, at)
        if not 0 < hb <= MAX_HEARTBEAT_INTERVAL_MS or tenure < 0:
            return None
        got = lay[1](lay, value, at + 12)
        if got is None:
            return None
        vector, num, end = got
        sender = self._sender(key, value, ent, end)
        if sender is None or _U32.unpack_from(value, 2)[0] != crc32(value[6:], _V8_TASK_HEAD_CRC):
            return None  # (the decoder says why: another key's identity, a check that fails)
        sender.layout = lay
        return sender, T_TASK_BEAT_V8, num, hb, (vector, tenure)

    def miss(self, key: bytes, value: bytes, hl: int) -> Identity | None:
        """Cache miss on a partition record whose header (``hl`` bytes) is valid: parse the
        identity part for the common shape (every length in one byte), strictly; a known
        sender (its three ids) comes from a cache. None when anything is unusual: the
        strict decoder then decides (it accepts exactly what this accepts, and more)."""
        try:
            n = value[hl]
            e1 = hl + 1 + n
            m = value[e1]
            e2 = e1 + 1 + m
            o = value[e2]
            e3 = e2 + 1 + o
            t = value[e3]
            e4 = e3 + 1 + t
        except IndexError:
            return None
        if not (0 < n < 0x80 and 0 < m < 0x80 and 0 < o < 0x80 and 0 < t < 0x80):
            return None
        size = len(value)
        if e4 + 1 == size:  # one-byte partition
            partition = value[e4]
            if partition >= 0x80:
                return None
        elif e4 + 1 < size:
            try:
                partition, end = read_uvarint(value, e4, MAX_PARTITION, "partition", DecodeError)
            except DecodeError:
                return None
            if end != size:
                return None
        else:
            return None
        senders = self.senders
        sender = senders.get(value[hl:e3])
        if sender is None:
            try:
                client = value[hl + 1 : e1].decode("utf-8")
                instance = value[e1 + 1 : e2].decode("utf-8")
                group = value[e2 + 1 : e3].decode("utf-8")
            except UnicodeDecodeError:
                return None
            admin_ok = group not in self.keyed
            sender = ((client, instance), fence_key(client, instance), group, admin_ok)
            senders[value[hl:e3]] = sender
        topics = self.topics
        topic = topics.get(value[e3:e4])
        if topic is None:
            try:
                topic = value[e3 + 1 : e4].decode("utf-8")
            except UnicodeDecodeError:
                return None
            if not valid_topic(topic):
                return None
            topics[value[e3:e4]] = topic
        ident, fkey, group, admin_ok = sender
        canonical = record_key(group, topic, partition)
        if canonical != key:
            return None
        ident_bytes = value[hl:]
        ent = Identity(
            canonical,
            ident,
            fkey,
            group,
            self.parts.get(canonical),
            topic,
            partition,
            admin_ok,
            ident_bytes,
        )
        self.put(ident_bytes, canonical, ent)
        return ent

    def other_sender(self, key: object, value: bytes, start: int) -> Identity | None:
        """The identity of the identity part ``value[start:]`` of a task record whose key's
        identity (from the key cache) is another sender's: a claim's winner, a restarted
        instance. By its bytes, else parsed strictly (:meth:`miss`); None if it is not a
        valid identity part naming ``key`` (the strict decoder then decides)."""
        if key.__class__ is not bytes:
            return None
        assert isinstance(key, bytes)  # (for the type checker: the line above)
        ent = self.by_bytes.get(value[start:])
        if ent is None:
            return self.miss(key, value, start)
        if ent.key != key:
            return None
        self.by_key[key] = ent
        return ent

    def entry(
        self, ident: bytes, client: str, instance: str, group: str, topic: str, partition: int
    ) -> Identity:
        """The identity of one entry of a version 7 MemberHeartbeat that the cache does not
        hold yet: ``ident`` is the identity part a version 1 record of the same sender and
        partition carries (so the two share one entry). The key cache is left alone: it
        points at what the key's version 1 records used last (the heartbeat lane's)."""
        canonical = record_key(group, topic, partition)
        ent = Identity(
            canonical,
            (client, instance),
            fence_key(client, instance),
            group,
            self.parts.get(canonical),
            topic,
            partition,
            group not in self.keyed,
            ident,
        )
        by_bytes = self.by_bytes
        if len(by_bytes) >= CACHE_LIMIT:
            self.put(ident, canonical, ent)  # (starts anew)
        else:
            by_bytes[ident] = ent
        return ent

    def shared(
        self,
        key: object,
        value: bytes | bytearray | memoryview,
        start: int,
        client: str,
        instance: str,
        group: str,
        topic: str,
        partition: int,
    ) -> Identity:
        """The identity of a strictly decoded record of version 3, 4 or 6: its identity
        part (``value[start:]``) is byte for byte that of the version 1 partition types, so
        it shares their cache entry."""
        canonical = record_key(group, topic, partition)
        cacheable = value.__class__ is bytes and key.__class__ is bytes
        ident_bytes = bytes(value[start:])
        ent = self.by_bytes.get(ident_bytes) if cacheable else None
        if ent is None:
            ent = Identity(
                canonical,
                (client, instance),
                fence_key(client, instance),
                group,
                self.parts.get(canonical),
                topic,
                partition,
                group not in self.keyed,  # untagged: the pausing admin only without a key
                ident_bytes,
            )
            if cacheable:
                self.put(ident_bytes, canonical, ent)
        elif ent.key == key:  # (a key of bytes: only such entries are cached)
            self.by_key[ent.key] = ent  # so the task lane finds the sender's entry by its key
        return ent
