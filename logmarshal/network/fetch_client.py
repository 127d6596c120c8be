"""The replay's own Kafka client: Fetch and ListOffsets on a raw socket (TLS when the
connection has it) to a partition's leader, for the stored batches themselves.

Why not librdkafka (:class:`_BatchReader` says more): it parses records itself, and a
stored batch that does not decode stalls or garbles it, so a replay over the network could
neither skip the batch nor agree with an embedded replay of the same log. Both requests
and their answers are packed and read here, not through kafka-python's protocol classes:
a client process then never imports kafka-python (about 0.1 s of start-up and 18,000
objects that every full collection of the cyclic GC walks; docs/performance.md, History,
"Network consumer", "kafka-python out of client processes"). Tests hold the bytes equal to
kafka-python's.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from storage._kafka_framing import MAX_ANSWER, recv_frame
from storage._records import crc32c

from ..cluster import PastMarkers
from ..errors import ClosedError, NetworkError, OffsetOutOfRange, UnknownPartition

log = logging.getLogger(__name__)

#: what a request's answer decodes to (:meth:`_BatchReader._round_trip`)
_Answer = TypeVar("_Answer")

# Raw batches for replay (_BatchReader): Fetch v5, the first with the log start offset,
# served by every Kafka since 1.0 and by logmarshal's broker. Its request and answer are
# packed and read here (:func:`encode_fetch`, :func:`decode_fetch`), not through
# kafka-python's generic objects: an idle member's replay fetches several times a second
# (each of its own writes answers the long poll), and building, encoding and decoding them
# cost about 0.25 ms of its ~0.5 ms CPU a fetch (bench/idle.py, 2026-11-29). Byte for byte
# what kafka-python's FetchRequest[5] sends (a test holds them equal).
_FETCH_API_KEY = 1
_FETCH_VERSION = 5
_CLIENT_ID = b"logmarshal-replay"
#: request header v1 (api key, version, correlation id, client id length), the body's head
#: (replica id, max wait, min bytes, max bytes, isolation level, one topic, its name's
#: length), each partition (index, fetch offset, log start offset, max bytes)
_FETCH_HEADER = struct.Struct(">hhih")
_FETCH_HEAD = struct.Struct(">iiiibih")
_FETCH_PARTITION = struct.Struct(">iqqi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
#: an answered partition's head (index, error code, high watermark, last stable offset,
#: log start offset) and an aborted transaction (producer id, first offset)
_ANSWER_HEAD = struct.Struct(">ihqqq")
_ABORTED = 16
#: bytes an answer may hold beyond the records asked for, for its head and each partition's
_ANSWER_SLACK = 1024
# ListOffsets v2 (isolation level, no flexible fields): the log start and end of a partition
# whose fetch was out of range, asked of the leader that said so. Apache Kafka answers such a
# fetch with high watermark -1, so without this the replay could not tell a log that went
# back (an unclean leader election) from one whose start moved (PROTOCOL.md, "A
# coordination log that loses records"). Packed and read by :func:`encode_list_offsets` and
# :func:`decode_list_offsets`: the body's head (replica id, isolation level, one topic, its
# name's length), each partition asked (index, timestamp); an answered partition (index,
# error code, timestamp, offset)
_LIST_OFFSETS_API_KEY = 2
_LIST_OFFSETS_VERSION = 2
_LIST_OFFSETS_HEAD = struct.Struct(">ibih")
_LIST_OFFSETS_PARTITION = struct.Struct(">iq")
_LIST_OFFSETS_ANSWER = struct.Struct(">ihqq")
# OffsetForLeaderEpoch v3 (KIP-320; no flexible fields; Kafka 4 serves v2..v4): where the
# leader's log of an epoch ends, asked after a data partition's leader changed under a
# member's reader (an unclean election may have cut the log below the member's position).
# The body's head (replica id -1, one topic, its name's length), the partition asked (index,
# current leader epoch -1: not fenced by it, the epoch asked), an answered partition (error
# code, index, the largest epoch at or below the one asked, the offset where its log ends)
_EPOCH_API_KEY = 23
_EPOCH_VERSION = 3
_EPOCH_HEAD = struct.Struct(">iih")
_EPOCH_PARTITION = struct.Struct(">iii")
_EPOCH_ANSWER = struct.Struct(">hiiq")
_EARLIEST = -2
_LATEST = -1
_OFFSET_OUT_OF_RANGE = 1
_UNKNOWN_TOPIC_OR_PARTITION = 3
#: a stored batch's baseOffset, batchLength, magic, crc, attributes and lastOffsetDelta
#: (storage/_records.py has the whole layout): enough to find Kafka's control batches
_BATCH_HEAD = struct.Struct(">qi4xbIhi")
_LOG_OVERHEAD = 12  # baseOffset and batchLength, outside batchLength's count
_MIN_BATCH_LENGTH = 49
_CONTROL = 0x20
#: the one record of a control batch as Kafka writes it (length 16, attributes 0, timestamp
#: and offset deltas 0, a 4-byte key whose version and type's high byte are 0): where these
#: bytes do not occur, an answer holds no control batch. bytes.find scans 8 MiB in about a
#: millisecond; walking the batch headers in Python costs more than decoding them (a log of
#: one-record batches, as Marshalers write __marshal), so only a hit pays for the walk
_CONTROL_RECORD = b"\x20\x00\x00\x00\x08\x00\x00\x00"
#: how often one fetch_batches call fetches again past control batches before it answers
#: with what it has (each round moves past at least one)
_CONTROL_ROUNDS = 8
# the librdkafka TLS settings _BatchReader follows; any other ssl.* setting means it cannot
# connect as librdkafka would, and replay then reads through librdkafka
_TLS_SETTINGS = frozenset(
    {
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)


def _batch_transport(conf: Mapping[str, Any]) -> tuple[bool, ssl.SSLContext | None]:
    """Whether :class:`_BatchReader` can connect as librdkafka does, and its TLS context.

    PLAINTEXT, or SSL with the usual settings (CA, client certificate, hostname check, as
    librdkafka applies them). SASL is librdkafka's alone: (False, None)."""
    protocol = str(conf.get("security.protocol", "plaintext")).lower()
    if protocol == "plaintext":
        return True, None
    tls_keys = {
        k for k in conf if k.startswith("ssl.") or k == "enable.ssl.certificate.verification"
    }
    if protocol != "ssl" or tls_keys - _TLS_SETTINGS - {"enable.ssl.certificate.verification"}:
        return False, None
    try:
        context = ssl.create_default_context(
            cafile=conf.get("ssl.ca.location"), cadata=conf.get("ssl.ca.pem")
        )
        if conf.get("ssl.certificate.location"):
            context.load_cert_chain(
                conf["ssl.certificate.location"],
                conf.get("ssl.key.location"),
                conf.get("ssl.key.password"),
            )
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        log.warning("replay reads records through librdkafka: its TLS settings fail here (%s)", exc)
        return False, None
    if str(conf.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        context.check_hostname = False
    if str(conf.get("enable.ssl.certificate.verification", "true")).lower() in ("false", "0"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return True, context


def _whole_batch_first(data: bytes) -> bool:
    """Whether ``data`` starts with a whole batch (as far as its length says)."""
    if len(data) < _LOG_OVERHEAD:
        return False
    (length,) = struct.unpack_from(">i", data, 8)
    return _LOG_OVERHEAD + length <= len(data)


def _drop_control(data: bytes) -> tuple[bytes, int | None]:
    """``data`` without its control batches (Kafka's transaction markers, which carry no
    records for a reader), and the offset after the last one dropped (None: none was).

    Only batches whose CRC matches are dropped; a damaged one, and whatever does not parse
    as a batch, is left for the decoder to report. Costs one scan at C speed, and where a
    control record may be, one header read per batch."""
    if _CONTROL_RECORD not in data:
        return data, None
    n = len(data)
    pos = start = 0
    kept: list[memoryview] = []
    after = None
    view = memoryview(data)
    head = _BATCH_HEAD
    while n - pos >= head.size:
        base, length, magic, crc, attributes, last_delta = head.unpack_from(data, pos)
        end = pos + _LOG_OVERHEAD + length
        if length < _MIN_BATCH_LENGTH or end > n or magic != 2:
            break
        if attributes & _CONTROL and crc32c(view[pos + 21 : end]) == crc:
            if pos > start:
                kept.append(view[start:pos])
            start = end
            after = base + last_delta + 1
        pos = end
    if after is None:
        return data, None
    kept.append(view[start:])
    return b"".join(kept), after


class FetchedPartition(NamedTuple):
    """One partition of a Fetch v5 answer (what the replay reads of it)."""

    partition_index: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes | None


def encode_fetch(
    correlation_id: int,
    topic: str,
    offsets: Mapping[int, int],
    max_bytes: int,
    max_wait_ms: int,
    client_id: bytes = _CLIENT_ID,
) -> bytes:
    """A framed Fetch v5 of ``offsets``' partitions of ``topic`` (min bytes 1, read
    uncommitted, each partition up to ``max_bytes`` and the whole answer up to that many per
    partition)."""
    name = topic.encode()
    body = b"".join(
        (
            _FETCH_HEADER.pack(_FETCH_API_KEY, _FETCH_VERSION, correlation_id, len(client_id)),
            client_id,
            _FETCH_HEAD.pack(
                -1, max_wait_ms, 1, min(max_bytes * len(offsets), 0x7FFFFFFF), 0, 1, len(name)
            ),
            name,
            _I32.pack(len(offsets)),
            *(_FETCH_PARTITION.pack(p, offset, -1, max_bytes) for p, offset in offsets.items()),
        )
    )
    return _I32.pack(len(body)) + body


def _answer_topics(frame: bytes, correlation_id: int) -> int:
    """How many topics an answer of header v0 and a throttle time (Fetch v5, ListOffsets v2)
    names; ConnectionError if it answers another request than ``correlation_id``."""
    got, _throttle, topics = struct.unpack_from(">iii", frame, 0)
    if got != correlation_id:
        raise ConnectionError(f"answer to request {got}, expected {correlation_id}")
    return topics


def _topic_at(frame: bytes, pos: int) -> tuple[str, int, int]:
    """An answered topic's name and partition count at ``pos``, and where its partitions
    start; ValueError for a null name or one that runs past the frame."""
    (length,) = _I16.unpack_from(frame, pos)
    pos += 2
    if length < 0 or pos + length > len(frame):
        raise ValueError("an answer that ends inside a topic name")
    name = frame[pos : pos + length].decode()
    (count,) = _I32.unpack_from(frame, pos + length)
    return name, count, pos + length + 4


def decode_fetch(frame: bytes, correlation_id: int) -> dict[str, list[FetchedPartition]]:
    """A Fetch v5 answer (``frame``: without its size) as its partitions by topic;
    ConnectionError if it answers another request, ValueError (or struct.error) if it does
    not parse."""
    end = len(frame)

    def span(pos: int, n: int) -> int:
        """Where ``n`` bytes from ``pos`` end; ValueError past the frame."""
        if n < 0 or pos + n > end:
            raise ValueError("a Fetch answer that ends inside a field")
        return pos + n

    pos = 12
    out: dict[str, list[FetchedPartition]] = {}
    for _ in range(_answer_topics(frame, correlation_id)):
        name, count, pos = _topic_at(frame, pos)
        parts = out.setdefault(name, [])
        for _ in range(count):
            index, code, high, _stable, start = _ANSWER_HEAD.unpack_from(frame, pos)
            pos += _ANSWER_HEAD.size
            (aborted,) = _I32.unpack_from(frame, pos)
            pos = span(pos + 4, max(0, aborted) * _ABORTED)
            (size,) = _I32.unpack_from(frame, pos)
            pos += 4
            records = None
            if size >= 0:
                records = frame[pos : span(pos, size)]
                pos += size
            parts.append(FetchedPartition(index, code, high, start, records))
    return out


def encode_list_offsets(
    correlation_id: int,
    topic: str,
    partitions: Sequence[int],
    timestamp: int,
    client_id: bytes = _CLIENT_ID,
) -> bytes:
    """A framed ListOffsets v2 of ``partitions`` of ``topic`` at ``timestamp`` (-2: the log
    start, -1: the log end), read uncommitted."""
    name = topic.encode()
    body = b"".join(
        (
            _FETCH_HEADER.pack(
                _LIST_OFFSETS_API_KEY, _LIST_OFFSETS_VERSION, correlation_id, len(client_id)
            ),
            client_id,
            _LIST_OFFSETS_HEAD.pack(-1, 0, 1, len(name)),
            name,
            _I32.pack(len(partitions)),
            *(_LIST_OFFSETS_PARTITION.pack(p, timestamp) for p in partitions),
        )
    )
    return _I32.pack(len(body)) + body


def decode_list_offsets(frame: bytes, correlation_id: int) -> dict[str, dict[int, int]]:
    """A ListOffsets v2 answer (``frame``: without its size) as each topic's partitions
    answered without an error, with their offsets; ConnectionError if it answers another
    request, ValueError (or struct.error) if it does not parse."""
    out: dict[str, dict[int, int]] = {}
    for name, partitions in _topics(frame, correlation_id, _LIST_OFFSETS_ANSWER):
        found = out.setdefault(name, {})
        for index, code, _timestamp, offset in partitions:
            if code == 0:
                found[index] = offset
    return out


def _topics(
    frame: bytes, correlation_id: int, layout: struct.Struct
) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
    """Each answered topic of an answer of header v0 and a throttle time whose partitions
    are of fixed size, ``layout``: its name and its partitions' fields (a topic answered
    with none is there, with none)."""
    pos = 12
    for _ in range(_answer_topics(frame, correlation_id)):
        name, count, pos = _topic_at(frame, pos)
        partitions = []
        for _ in range(count):
            partitions.append(layout.unpack_from(frame, pos))
            pos += layout.size
        yield name, partitions


def encode_epoch_end(
    correlation_id: int, topic: str, partition: int, epoch: int, client_id: bytes = _CLIENT_ID
) -> bytes:
    """A framed OffsetForLeaderEpoch v3 of one partition at leader epoch ``epoch``."""
    return encode_epoch_ends(correlation_id, topic, {partition: epoch}, client_id)


def encode_epoch_ends(
    correlation_id: int, topic: str, epochs: Mapping[int, int], client_id: bytes = _CLIENT_ID
) -> bytes:
    """A framed OffsetForLeaderEpoch v3 of partitions of one topic, each at its epoch."""
    name = topic.encode()
    body = b"".join(
        (
            _FETCH_HEADER.pack(_EPOCH_API_KEY, _EPOCH_VERSION, correlation_id, len(client_id)),
            client_id,
            _EPOCH_HEAD.pack(-1, 1, len(name)),
            name,
            _I32.pack(len(epochs)),
            *(_EPOCH_PARTITION.pack(p, -1, e) for p, e in sorted(epochs.items())),
        )
    )
    return _I32.pack(len(body)) + body


def decode_epoch_end(frame: bytes, correlation_id: int) -> dict[str, dict[int, tuple[int, int]]]:
    """An OffsetForLeaderEpoch v3 answer as each topic's partitions answered without an error,
    with (the epoch found, the offset its log ends at); ConnectionError if it answers another
    request, ValueError (or struct.error) if it does not parse."""
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for name, partitions in _topics(frame, correlation_id, _EPOCH_ANSWER):
        found = out.setdefault(name, {})
        for code, index, epoch, end in partitions:
            if code == 0:
                found[index] = (epoch, end)
    return out


class _SplitLeaders(Exception):
    """The partitions asked for together have more than one leader (one request cannot
    carry them: the caller fetches each on its own)."""


class _BatchReader:
    """Stored batches of some partitions of one topic as their leader serves them (Fetch v5
    on one socket): one partition for :meth:`NetworkCluster.fetch_batches`, several (the
    replay's coordination partitions) in one request for
    :meth:`NetworkCluster.fetch_batches_many`.

    Why not librdkafka for replay: it parses records itself, and on a stored batch that does
    not decode it stalls without an error (a length past the batch), drops records or hands
    out part of the batch (measured with confluent-kafka against this broker). A replay over
    the network could then neither skip the batch nor agree with an embedded replay of the
    same log. The bytes read here are decoded as the embedded cluster decodes its own
    (:func:`storage._records.decode_columns_from`), so every replayer skips the same batches.
    """

    def __init__(
        self,
        topic: str,
        partitions: tuple[int, ...],
        leader: Callable[[], tuple[str, int]],
        timeout: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.lock = threading.Lock()
        self.last_used = time.monotonic()
        self._topic = topic
        self._partitions = partitions
        self._leader = leader  # () -> (host, port), asked afresh after a failure
        self._timeout = timeout
        self._tls = tls
        self._sock: socket.socket | None = None
        self._correlation = itertools.count(1)
        #: :meth:`cancel` ended the fetch in flight (its connection shut down under it)
        self._cancelled = False

    def cancel(self) -> None:
        """End the fetch in flight now, from another thread: it raises ClosedError instead
        of waiting out its long poll (a stopping replay). Nothing when none is in flight (a
        fetch not begun yet is the stopping caller's to skip)."""
        if not self.lock.locked():
            return
        self._cancelled = True
        sock = self._sock
        if sock is not None:
            # the plain socket's shutdown, under TLS too (the TLS object is the reader's)
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def fetch(self, offset: int, max_bytes: int, max_wait: float) -> bytes | PastMarkers:
        """The stored batches from the one holding ``offset`` on (about ``max_bytes``)."""
        (partition,) = self._partitions
        got = self.fetch_many({partition: offset}, max_bytes, max_wait)[partition]
        if isinstance(got, Exception):
            raise got
        return got

    def fetch_many(
        self, offsets: Mapping[int, int], max_bytes: int, max_wait: float
    ) -> dict[int, bytes | PastMarkers | Exception]:
        """Per partition, the stored batches from the one holding its offset on (about
        ``max_bytes`` each), or the error its leader answered for it, all in one request: the
        broker answers once any has records (or ``max_wait`` elapsed). A failure of the
        connection itself is raised (NetworkError) for them all.

        What Apache Kafka answers beyond logmarshal's broker is handled here (docs/broker.md,
        "Apache Kafka"): control batches (transaction markers) are dropped, and a partition
        that had nothing else is fetched again past them (else its reader, whose position
        moves only with records, would ask for the marker again at once, forever); one that
        has nothing after them either is answered :class:`PastMarkers` (its reader's position
        moves past them: a catch-up to the log's end must not wait at a trailing marker); a
        partition whose first batch came cut (Kafka exempts only the first partition with
        records from ``max_bytes``: the next one gets nothing when its first batch is larger)
        is fetched again alone, which brings it whole."""
        self.last_used = time.monotonic()
        self._cancelled = False  # a cancel that came after the last fetch ended
        raw, passed_over = self._fetch_raw(offsets, max_bytes, max_wait)
        out: dict[int, bytes | PastMarkers | Exception] = dict(raw)
        at = dict(offsets)  # where each partition's answer was fetched from
        past: dict[int, int] = {}  # the offset after the last marker each one dropped
        shared = len(at) > 1  # whether they were fetched in one request
        for _ in range(_CONTROL_ROUNDS):
            again: dict[int, int] = {}
            alone = False
            for p in at:  # the answers of the last fetch
                got = out[p]
                if not isinstance(got, bytes):
                    continue
                if shared and (p in passed_over or (got and not _whole_batch_first(got))):
                    again[p] = at[p]
                    alone = True
                    continue
                kept, after = _drop_control(got)
                out[p] = kept
                if after is not None:
                    past[p] = after
                    if not _whole_batch_first(kept):
                        again[p] = after
            if not again:
                break
            alone = alone or any(
                isinstance(g, bytes) and _whole_batch_first(g)
                for p, g in out.items()
                if p not in again
            )
            if alone:  # each by itself, at once: records are on hand or one was passed over
                passed_over, shared = set(), False
                for p, offset in again.items():
                    out[p] = self._fetch_raw({p: offset}, max_bytes, 0.0)[0][p]
            else:  # nothing to hand out yet: long-poll past the markers as asked
                more, passed_over = self._fetch_raw(again, max_bytes, max_wait)
                out.update(more)
                shared = len(again) > 1
            at = again
        for p, after in past.items():
            got = out[p]
            if isinstance(got, bytes) and not _whole_batch_first(got):
                out[p] = PastMarkers(after)  # nothing after them
        return out

    def _fetch_raw(
        self, offsets: Mapping[int, int], max_bytes: int, max_wait: float
    ) -> tuple[dict[int, bytes | Exception], set[int]]:
        """One Fetch (retried once on a new connection): each partition's bytes as served,
        and the partitions answered with nothing although records follow their offset."""
        for attempt in range(2):
            try:
                answers = self._call(offsets, max_bytes, max_wait)
            except (OSError, ValueError, struct.error) as exc:  # socket, TLS, a torn answer
                self.close()
                if self._cancelled:
                    self._cancelled = False
                    raise ClosedError(f"the fetch of {self._topic} was cancelled") from None
                if attempt:
                    raise NetworkError(
                        f"fetching {self._topic}/{self._name(offsets)} from its leader: {exc}"
                    ) from None
                continue
            out: dict[int, bytes | Exception] = {}
            passed_over = set()
            unbounded: list[int] = []
            for p, offset in offsets.items():
                partition = answers[p]
                code = partition.error_code
                if code == 0:
                    out[p] = bytes(partition.records or b"")
                    if not out[p] and partition.high_watermark > offset:
                        passed_over.add(p)
                elif code == _OFFSET_OUT_OF_RANGE:
                    out[p] = OffsetOutOfRange(
                        offset, partition.log_start_offset, partition.high_watermark
                    )
                    if partition.high_watermark < 0:
                        unbounded.append(p)
                elif code == _UNKNOWN_TOPIC_OR_PARTITION:
                    out[p] = UnknownPartition(self._topic, p)
                else:
                    out[p] = NetworkError(f"fetching {self._topic}/{p}: Kafka error code {code}")
            if any(type(got) is NetworkError for got in out.values()):
                self.close()  # not the leader (any more): ask the metadata again
                if not attempt:
                    continue
            if unbounded:
                self._bound(out, {p: offsets[p] for p in unbounded})
            return out, passed_over
        raise AssertionError("unreachable")

    def _bound(self, out: dict[int, bytes | Exception], offsets: Mapping[int, int]) -> None:
        """Fill in the log start and end of the partitions the leader answered out of range
        without them (Apache Kafka), asked of the same leader at once. Left unknown (-1) when
        it cannot answer: the caller then treats the answer as before."""
        try:
            earliest = self._list(offsets, _EARLIEST)
            latest = self._list(offsets, _LATEST)
        except (OSError, ValueError, struct.error) as exc:
            self.close()
            log.warning("%s/%s: no log bounds after an out-of-range fetch (%s)",
                        self._topic, self._name(offsets), exc)  # fmt: skip
            return
        for p, offset in offsets.items():
            start, end = earliest.get(p, -1), latest.get(p, -1)
            if end >= 0:
                out[p] = OffsetOutOfRange(offset, start, end)

    def bounds(self, partition: int) -> tuple[int, int]:
        """``(log start, log end)`` of ``partition``, as its leader knows them now (one
        ListOffsets each on this reader's connection, retried once on a new one)."""
        for attempt in range(2):
            try:
                start = self._list({partition: 0}, _EARLIEST)
                end = self._list({partition: 0}, _LATEST)
            except (OSError, ValueError, struct.error) as exc:
                self.close()
                if attempt:
                    raise NetworkError(
                        f"asking the bounds of {self._topic}/{partition} of its leader: {exc}"
                    ) from None
                continue
            if partition in start and partition in end:
                return start[partition], end[partition]
            self.close()  # an error code (not the leader any more): ask the metadata again
        raise NetworkError(f"{self._topic}/{partition}: its leader did not say its bounds")

    def epoch_ends(self, epochs: Mapping[int, int]) -> dict[int, int | Exception]:
        """:meth:`epoch_end` of several partitions (all led by the node this reader's
        leader names) in one request: each one's end, or the NetworkError saying why it
        cannot be told (as :meth:`epoch_end` raises it)."""
        for attempt in range(2):
            try:
                answer = self._round_trip(
                    lambda cid: encode_epoch_ends(cid, self._topic, epochs), decode_epoch_end, 0.0
                )
            except (OSError, ValueError, struct.error) as exc:
                self.close()
                if attempt:
                    failed = NetworkError(f"asking {self._topic}'s leader where epochs end: {exc}")
                    return dict.fromkeys(epochs, failed)
                continue
            found = answer.get(self._topic, {})
            out: dict[int, int | Exception] = {}
            for partition, epoch in epochs.items():
                told = found.get(partition)
                out[partition] = (
                    told[1]
                    if told is not None and told[1] >= 0
                    else NetworkError(
                        f"{self._topic}/{partition}: the node asked cannot say where leader "
                        f"epoch {epoch} ends (not its leader, or an older one)"
                    )
                )
            return out
        raise AssertionError("unreachable")  # (the second attempt returns)

    def epoch_end(self, partition: int, epoch: int) -> int | None:
        """Where ``partition``'s log of leader epoch ``epoch`` ends on its leader now (the
        first offset of the next epoch it has, or its log end): below a reader's position
        after the leader changed, the log was cut under it. NetworkError when the node asked
        cannot tell: an error code (not the leader), or -1 (an epoch past its own: a leader
        that is not the newest). Taken for "not cut", that answer let the reader take the
        records of the new epoch as the last read, and the cut was never told."""
        for attempt in range(2):
            try:
                answer = self._round_trip(
                    lambda cid: encode_epoch_end(cid, self._topic, partition, epoch),
                    decode_epoch_end,
                    0.0,
                )
            except (OSError, ValueError, struct.error) as exc:
                self.close()
                if attempt:
                    raise NetworkError(
                        f"asking {self._topic}/{partition}'s leader where epoch {epoch} ends: {exc}"
                    ) from None
                continue
            found = answer.get(self._topic, {}).get(partition)
            if found is not None and found[1] >= 0:
                return found[1]
            self.close()  # not the leader, or not the newest: ask the metadata again
        raise NetworkError(
            f"{self._topic}/{partition}: the node asked cannot say where leader epoch {epoch} "
            "ends (not its leader, or an older one)"
        )

    def _list(self, offsets: Mapping[int, int], spec: int) -> dict[int, int]:
        """One ListOffsets of ``offsets``' partitions at ``spec`` (earliest or latest): the
        offset of each partition answered without an error."""
        answer = self._round_trip(
            lambda cid: encode_list_offsets(cid, self._topic, list(offsets), spec),
            decode_list_offsets,
            0.0,
        )
        found = answer.get(self._topic, {})
        return {p: offset for p, offset in found.items() if p in offsets}

    def _name(self, offsets: Mapping[int, int]) -> str:
        return ",".join(str(p) for p in offsets)

    def _round_trip_connect(self) -> None:
        """Connect to the leader (TLS if the connection has it)."""
        host, port = self._leader()
        sock = socket.create_connection((host, port), timeout=self._timeout)
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(sock, server_hostname=host)
            except BaseException:
                sock.close()
                raise
        self._sock = sock

    def _round_trip(
        self,
        encode: Callable[[int], bytes],
        decode: Callable[[bytes, int], _Answer],
        max_wait: float,
        max_size: int = MAX_ANSWER,
    ) -> _Answer:
        """Send the request ``encode`` packs for a new correlation id to the leader
        (connecting first if need be) and return its answer as ``decode`` reads it (which
        checks the correlation id); the leader may hold it ``max_wait`` seconds."""
        if self._sock is None:
            self._round_trip_connect()
        assert self._sock is not None
        self._sock.settimeout(self._timeout + max_wait)
        correlation_id = next(self._correlation)
        self._sock.sendall(encode(correlation_id))
        return decode(recv_frame(self._sock, max_size), correlation_id)

    def _call(
        self, offsets: Mapping[int, int], max_bytes: int, max_wait: float
    ) -> dict[int, FetchedPartition]:
        response = self._round_trip(
            lambda cid: encode_fetch(cid, self._topic, offsets, max_bytes, int(max_wait * 1000)),
            decode_fetch,
            max_wait,
            # as librdkafka sizes its own: at least what was asked, with room for the
            # answer's head (a larger size is a broken connection, not an allocation)
            max(MAX_ANSWER, max_bytes * len(offsets) + _ANSWER_SLACK * (len(offsets) + 1)),
        )
        answers = {
            p.partition_index: p
            for p in response.get(self._topic, ())
            if p.partition_index in offsets
        }
        if len(answers) != len(offsets):
            raise ConnectionError("the answer does not name every partition asked for")
        return answers
