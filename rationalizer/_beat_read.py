"""How the replay reads a version 7 MemberHeartbeat (PROTOCOL.md, "Version 7"): what
:func:`~._codec.decode_v7_fields` accepts, with each entry's identity part, read by the C
reader (``_vectors.beat``) when it is built. Apart from the codec because only the replay
needs the identity parts, and the C reader's twin in Python is the codec's strict decoder."""

from __future__ import annotations

from collections.abc import Callable

from ._codec import decode_v7_fields
from ._messages import BeatEntry
from ._varint import uvarint

__all__ = ["BeatRead", "BeatRow", "beat_rows", "read_v7"]

#: One entry of a MemberHeartbeat as the replay reads it: the identity part a version 1
#: record of the same sender and partition carries (ids, group, topic and partition as
#: :func:`encode` writes them, so the two share one cache entry), the topic, the partition,
#: the tenure named and ``last_offset``.
BeatRow = tuple[bytes, str, int, int, int]
#: ``(client_id, instance_id, group_id, heartbeat_interval_ms, rows)``
BeatRead = tuple[str, str, str, int, tuple[BeatRow, ...]]

_native_beat: Callable[[bytes, bytes], tuple[str, int, str, str, tuple[BeatRow, ...]] | None] | None
try:  # the C reader (setup.py builds it); else the Python decoder, the same
    from ._vectors import beat as _native_beat
except ImportError:  # pragma: no cover - an unbuilt tree
    _native_beat = None

#: the varint of each number below 128 (a MemberHeartbeat entry's partition, mostly)
_ONE_BYTE = tuple(bytes((i,)) for i in range(128))


def beat_rows(
    client: str, instance: str, group: str, entries: list[BeatEntry]
) -> tuple[BeatRow, ...]:
    """``entries`` of a decoded MemberHeartbeat, each with its identity part (:data:`BeatRow`)."""
    c, i, g = client.encode(), instance.encode(), group.encode()
    who = uvarint(len(c)) + c + uvarint(len(i)) + i + uvarint(len(g)) + g
    rows = []
    topic_bytes = b""
    last_topic = ""
    for topic, partition, tenure, last in entries:
        if topic is not last_topic:
            t = topic.encode()
            topic_bytes = who + uvarint(len(t)) + t
            last_topic = topic
        ident = topic_bytes + (_ONE_BYTE[partition] if partition < 128 else uvarint(partition))
        rows.append((ident, topic, partition, tenure, last))
    return tuple(rows)


def read_v7(key: object, value: object, *, native: bool = True) -> BeatRead:
    """A version 7 MemberHeartbeat read for the replay (:data:`BeatRead`): what
    :func:`decode_v7_fields` accepts, with each entry's identity part. The C reader reads
    it when it is built (and ``native``); anything it does not take, the Python decoder
    reads, so what is accepted and every error are the decoder's. Raises only
    :class:`DecodeError`."""
    if native and _native_beat is not None:
        got = _native_beat(key, value)  # type: ignore[arg-type]  # (None unless bytes)
        if got is not None:
            group, hb, client, instance, rows = got
            return client, instance, group, hb, rows
    client, instance, group, hb, entries = decode_v7_fields(key, value)
    return client, instance, group, hb, beat_rows(client, instance, group, entries)
