"""The replay's stored-batch reader (``NetworkCluster.fetch_batches`` / ``fetch_batches_many``,
decoded by ``storage._records.decode_columns_from`` through ``coordlog.fetch_columns``) on
Apache Kafka's own answers, and the librdkafka readers beside it.

Each case is one Kafka answers and logmarshal's broker never does: a batch cut at the end of
an answer, batches that start before the fetch offset, control batches (transaction
markers) and aborted transactions, batches compressed by librdkafka, and (3 nodes) a leader
that dies between two fetches. What each reader hands out is in docs/broker.md, "Apache
Kafka".
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator, Sequence

import pytest
from confluent_kafka import Producer

from logmarshal import _coordlog as coordlog
from logmarshal.cluster import PastMarkers
from logmarshal.errors import NetworkError, OffsetOutOfRange, UnknownPartition
from logmarshal.network import NetworkCluster, readers
from storage._records import Compression, decode_columns_from, iter_batches

pytestmark = pytest.mark.kafka

Pair = tuple[bytes, bytes]


@pytest.fixture
def cluster(bootstrap: str) -> Iterator[NetworkCluster]:
    with NetworkCluster(bootstrap, timeout=30.0) as c:
        yield c


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _pairs(tag: str, n: int, size: int = 0) -> list[Pair]:
    return [(f"{tag}-{i}".encode(), f"{tag}-{i}:".encode().ljust(size, b"x")) for i in range(n)]


def _produce(
    bootstrap: str,
    topic: str,
    batches: Sequence[Sequence[Pair]],
    partition: int = 0,
    **conf: object,
) -> None:
    """Each of ``batches`` as one stored batch: all its records queued, then flushed."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 10_000,
            "batch.num.messages": 100_000,
            "enable.idempotence": False,
            **conf,
        }
    )
    # the topic's partitions known first: a record produced while librdkafka still waits
    # for them is queued apart and may be sent in a batch of its own (seen once under load:
    # 15 records stored as 0..13 and 14)
    producer.list_topics(topic, timeout=30)
    for batch in batches:
        for key, value in batch:
            producer.produce(topic, value=value, key=key, partition=partition)
        assert producer.flush(30) == 0


def _replay_read(
    cluster: NetworkCluster, topic: str, start: int, end: int, partition: int = 0
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of ``start <= offset < end`` as the replay reads them."""
    out = []
    for cols in coordlog.iter_columns(cluster, partition, start, end, topic):
        out.extend(zip(cols[0], cols[2], cols[3], strict=True))
    return out


def _librdkafka_read(read, count: int) -> list[tuple[int, bytes | None]]:
    """(offset, value) of ``count`` records through ``read(offset)`` (NetworkCluster.fetch or
    fetch_columns: librdkafka fetches in the background, so one call may bring fewer)."""
    out: list[tuple[int, bytes | None]] = []
    offset = 0
    deadline = time.monotonic() + 20
    while len(out) < count and time.monotonic() < deadline:
        got = read(offset)
        if isinstance(got, tuple):  # columns
            pairs = list(zip(got[0], got[3], strict=True))
        else:
            pairs = [(m.offset, m.value) for m in got]
        out.extend(pairs)
        if pairs:
            offset = pairs[-1][0] + 1
    return out


def _heads(data: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, attributes) of each whole batch in a fetch's answer."""
    return [(h.base_offset, h.last_offset, h.attributes) for h, _ in iter_batches(data)]


# ------------------------------------------------------------------- a batch cut at the end


def test_an_answer_cut_by_max_bytes_ends_in_a_partial_batch_that_is_read_later(
    cluster: NetworkCluster, bootstrap: str
) -> None:
    topic = _name("cut")
    cluster.create_topic(topic, 1)
    first, second = _pairs("a", 10, 1000), _pairs("b", 10, 1000)
    _produce(bootstrap, topic, [first, second])

    whole = cluster.fetch_batches(topic, 0, 0, max_bytes=1 << 20)
    assert whole is not None
    sizes = [bytes(b) for _, b in iter_batches(whole)]
    assert [h[:2] for h in _heads(whole)] == [(0, 9), (10, 19)]
    limit = len(sizes[0]) + len(sizes[1]) // 2  # half way into the second batch

    data = cluster.fetch_batches(topic, 0, 0, max_bytes=limit)
    assert data is not None
    # Kafka cut the second batch: the answer is exactly max_bytes, the first batch whole
    assert len(data) == limit
    assert data.startswith(sizes[0]) and len(data) < len(sizes[0]) + len(sizes[1])
    cols = decode_columns_from(data, 0)
    assert cols[0] == list(range(10))
    assert cols[2] == [k for k, _ in first] and cols[3] == [v for _, v in first]
    # the replay reads the rest from where the whole batches ended
    got = _replay_read(cluster, topic, 0, 20)
    assert [o for o, _, _ in got] == list(range(20))
    assert [(k, v) for _, k, v in got] == first + second

    # a max_bytes below the first batch still brings it whole (Kafka: KIP-74)
    small = cluster.fetch_batches(topic, 0, 0, max_bytes=100)
    assert small == sizes[0]


def test_a_partition_behind_another_in_one_answer_comes_whole(
    cluster: NetworkCluster, bootstrap: str
) -> None:
    """Kafka exempts only the first partition with records from max_bytes: the next one's
    first batch comes cut to max_bytes (no whole batch at all). The reader fetches it
    again alone, so each partition's batch comes whole from one call."""
    topic = _name("cut-many")
    cluster.create_topic(topic, 2)
    batches = {p: _pairs(f"p{p}", 20, 500) for p in (0, 1)}
    for p, pairs in batches.items():
        _produce(bootstrap, topic, [pairs], partition=p)
    size = len(cluster.fetch_batches(topic, 0, 0, max_bytes=1 << 20) or b"")
    assert size > 10_000

    got = cluster.fetch_batches_many(topic, {0: 0, 1: 0}, max_bytes=size // 2)
    assert got is not None
    for p, pairs in batches.items():
        data = got[p]
        assert isinstance(data, bytes)
        cols = decode_columns_from(data, 0)
        assert cols[0] == list(range(20)), p
        assert list(zip(cols[2], cols[3], strict=True)) == pairs

    many = coordlog.fetch_columns_many(cluster, topic, {0: 5, 1: 12}, max_bytes=size // 2)
    assert many is not None
    assert many[0][0] == list(range(5, 20)) and many[1][0] == list(range(12, 20))


# ------------------------------------------------------- batches starting before the offset


def test_a_fetch_from_the_middle_of_a_batch_hands_out_records_from_the_offset_on(
    cluster: NetworkCluster, bootstrap: str
) -> None:
    topic = _name("middle")
    cluster.create_topic(topic, 2)
    pairs = _pairs("m", 30, 20)
    _produce(bootstrap, topic, [pairs[:15], pairs[15:]])
    _produce(bootstrap, topic, [pairs], partition=1)

    data = cluster.fetch_batches(topic, 0, 7)
    assert data is not None
    # Kafka serves the whole batch holding offset 7, from its base offset 0
    assert struct.unpack_from(">q", data, 0)[0] == 0
    assert [h[:2] for h in _heads(data)] == [(0, 14), (15, 29)]
    cols = coordlog.fetch_columns(cluster, topic, 0, 7)
    assert cols[0] == list(range(7, 30))
    assert list(zip(cols[2], cols[3], strict=True)) == pairs[7:]
    # the last record of a batch, and the first of the next
    assert coordlog.fetch_columns(cluster, topic, 0, 14)[0] == list(range(14, 30))
    assert coordlog.fetch_columns(cluster, topic, 0, 15)[0] == list(range(15, 30))
    # several partitions in one request, each from the middle of its batch
    many = coordlog.fetch_columns_many(cluster, topic, {0: 22, 1: 9})
    assert many is not None
    assert many[0][0] == list(range(22, 30)) and many[1][0] == list(range(9, 30))
    assert many[1][3] == [v for _, v in pairs[9:]]
    # at the end: nothing, not an error
    assert coordlog.fetch_columns(cluster, topic, 0, 30)[0] == []


# ------------------------------------------------------------ compressed by another client


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
)
def test_batches_compressed_by_librdkafka_decode_as_produced(
    cluster: NetworkCluster, bootstrap: str, codec: Compression
) -> None:
    topic = _name(f"codec-{codec.name.lower()}")
    cluster.create_topic(topic, 1)
    first, second = _pairs("c", 200, 100), _pairs("d", 50, 3000)
    _produce(bootstrap, topic, [first, second], **{"compression.type": codec.name.lower()})

    data = cluster.fetch_batches(topic, 0, 0)
    assert data is not None
    heads = _heads(data)
    assert [h[:2] for h in heads] == [(0, 199), (200, 249)]
    # stored as the producer compressed them (the topic's compression.type is "producer")
    assert {h[2] & 0x07 for h in heads} == {int(codec)}
    assert len(data) < 200 * 100  # compressed: far below the records' own size
    got = _replay_read(cluster, topic, 0, 250)
    assert [o for o, _, _ in got] == list(range(250))
    assert [(k, v) for _, k, v in got] == first + second
    # from the middle of a compressed batch
    assert coordlog.fetch_columns(cluster, topic, 0, 123)[0] == list(range(123, 250))
    # librdkafka's own reading of the same batches agrees
    read = _librdkafka_read(lambda o: cluster.fetch_columns(topic, 0, o, max_wait=1.0), 250)
    assert read == [(o, v) for o, (_, v) in enumerate(first + second)]


# ------------------------------------------------------------------------- transactions


def _transactional_log(
    cluster: NetworkCluster, bootstrap: str, topic: str
) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """a (committed), b (aborted), c (committed) by one transactional producer:
    offsets 0-2 a, 3 COMMIT, 4-6 b, 7 ABORT, 8-9 c, 10 COMMIT; returns once the last
    marker is written (Kafka writes markers after commit_transaction returns)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": _name("tx"), "linger.ms": 5}
    )
    producer.init_transactions(30)
    a, b, c = _pairs("a", 3), _pairs("b", 3), _pairs("c", 2)
    for pairs, commit in ((a, True), (b, False), (c, True)):
        producer.begin_transaction()
        for key, value in pairs:
            producer.produce(topic, value=value, key=key, partition=0)
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    deadline = time.monotonic() + 30
    while cluster.latest_offset(topic, 0) != 11:  # the last stable offset, read_committed
        assert time.monotonic() < deadline, "the last marker was never written"
        time.sleep(0.05)  # Kafka's transaction coordinator: no clock of ours
    return a, b, c


def test_control_batches_are_skipped_and_the_replay_reads_aborted_records(
    cluster: NetworkCluster, bootstrap: str
) -> None:
    """The replay reads the log as stored (read_uncommitted: aborted records included, in
    offset order) and never hands out a transaction marker; librdkafka's read for the
    coordination log (fetch_columns, where stored batches cannot be fetched) agrees. A
    Consumer's reads (fetch, open_reader) are read_committed: no aborted record."""
    topic = _name("tx")
    cluster.create_topic(topic, 1)
    a, b, c = _transactional_log(cluster, bootstrap, topic)

    stored = [*a, *b, *c]
    stored_offsets = [0, 1, 2, 4, 5, 6, 8, 9]
    got = _replay_read(cluster, topic, 0, 11)
    assert [o for o, _, _ in got] == stored_offsets
    assert [(k, v) for _, k, v in got] == stored
    # from a marker, and from inside the aborted transaction
    assert coordlog.fetch_columns(cluster, topic, 0, 3)[0] == [4, 5, 6, 8, 9]
    assert coordlog.fetch_columns(cluster, topic, 0, 5)[0] == [5, 6, 8, 9]
    assert coordlog.fetch_columns(cluster, topic, 0, 7)[0] == [8, 9]
    many = coordlog.fetch_columns_many(cluster, topic, {0: 3})
    assert many is not None and many[0][0] == [4, 5, 6, 8, 9]
    # librdkafka, read_uncommitted, as the replay's fallback: the same records
    read = _librdkafka_read(lambda o: cluster.fetch_columns(topic, 0, o, max_wait=1.0), 8)
    assert read == list(zip(stored_offsets, [v for _, v in stored], strict=True))

    # a Consumer's reads: read_committed, the aborted b never handed out
    committed = [0, 1, 2, 8, 9]
    read = _librdkafka_read(lambda o: cluster.fetch(topic, 0, o, max_wait=1.0), 5)
    assert read == list(zip(committed, [v for _, v in (*a, *c)], strict=True))
    reader = cluster.open_reader()
    try:
        reader.want(topic, 0, 0)
        seen: list[int] = []
        deadline = time.monotonic() + 20
        while len(seen) < len(committed) and time.monotonic() < deadline:
            for read in reader.poll(0.5):
                assert read.error is None, read.error
                seen.extend(m.offset for m in read.records)
                reader.want(topic, 0, read.records[-1].offset + 1)
        assert seen == committed
    finally:
        reader.close()


def test_a_trailing_marker_long_polls_instead_of_answering_at_once(
    cluster: NetworkCluster, bootstrap: str
) -> None:
    """Fetched from the last transaction's marker (the replay's position after its last
    record), the reader goes past the marker and waits there for max_wait, as at the log's
    end, rather than answering at once with nothing: a replay would then spin on it. It
    answers where the marker ends (``PastMarkers``): the replay's position moves there, so
    a catch-up to the log's end does not wait at the marker."""
    topic = _name("tx-end")
    cluster.create_topic(topic, 1)
    _transactional_log(cluster, bootstrap, topic)
    started = time.monotonic()
    assert cluster.fetch_batches(topic, 0, 10, max_wait=1.0) == PastMarkers(11)
    assert time.monotonic() - started >= 0.8
    started = time.monotonic()
    assert cluster.fetch_batches_many(topic, {0: 10}, max_wait=1.0) == {0: PastMarkers(11)}
    assert time.monotonic() - started >= 0.8
    assert cluster.fetch_batches(topic, 0, 11, max_wait=0.1) == b""  # the log's end: no marker
    assert coordlog.fetch_columns(cluster, topic, 0, 10, max_wait=0.1)[0] == []
    # a record after the marker is handed out from the marker's offset
    _produce(bootstrap, topic, [_pairs("after", 1)])
    assert coordlog.fetch_columns(cluster, topic, 0, 10)[0] == [11]


def test_librdkafkas_read_moves_past_a_trailing_marker_as_the_batch_reader_does(
    bootstrap: str, librdkafka_only: NetworkCluster
) -> None:
    """Where stored batches cannot be fetched (SASL), the coordination log is read through
    librdkafka, whose position moves past a transaction marker without a record to hand
    out: that read answers ``PastMarkers`` too. Before, it answered nothing after a 10 s
    wait, every time, so a read up to the log's end (an audit's export, ``group
    describe``) waited at a trailing marker for 60 s and failed, and a replay spun on it."""
    topic = _name("tx-end-rdk")
    fallback = librdkafka_only
    fallback.create_topic(topic, 1)
    a, b, c = _transactional_log(fallback, bootstrap, topic)
    assert fallback.fetch_batches(topic, 0, 10) is None  # librdkafka's path
    assert fallback.fetch_columns(topic, 0, 10, max_wait=1.0) == PastMarkers(11)
    # again after a seek back: librdkafka's position after an assign can still be the
    # last one's for a while (11: taken for this read's, every record was skipped)
    for _ in range(3):
        read = [
            (k, v)
            for cols in coordlog.iter_columns(fallback, 0, 0, 11, topic=topic)
            for k, v in zip(cols[2], cols[3], strict=True)
        ]
        assert read == [*a, *b, *c]  # read_uncommitted, as the replay reads, to the end
        # from the marker again: no seek back into it, the answer is at hand
        assert fallback.fetch_columns(topic, 0, 10, max_wait=1.0) == PastMarkers(11)
        assert fallback.fetch_columns(topic, 0, 7, max_wait=1.0)[0] == [8, 9]
        # after a seek back, where the position before the seek is the answer too (the
        # position librdkafka still gives at first is not taken for the new one's)
        assert fallback.fetch_columns(topic, 0, 0, max_wait=1.0)[0][:1] == [0]
        assert fallback.fetch_columns(topic, 0, 10, max_wait=1.0) == PastMarkers(11)
    # a record after the marker is handed out from the marker's offset
    _produce(bootstrap, topic, [_pairs("after", 1)])
    got = fallback.fetch_columns(topic, 0, 10, max_wait=5.0)
    assert not isinstance(got, PastMarkers) and got[0] == [11]


def test_a_member_reader_at_a_marker_or_an_open_transaction_sees_no_stall(
    cluster: NetworkCluster, bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The member reader replaces its librdkafka consumer when a wanted partition gets no
    records while its log holds more (``readers._STALL_AFTER``). A log that ends in a
    transaction marker, or in a transaction still open, holds nothing a read_committed
    reader can be given: the check compares the last stable offset with where librdkafka
    will fetch next (past the markers it skipped), so neither is taken for a stall."""
    monkeypatch.setattr(readers, "_STALL_AFTER", 0.3)
    topic = _name("tx-idle")
    cluster.create_topic(topic, 1)
    _transactional_log(cluster, bootstrap, topic)  # ends with a COMMIT marker at 10
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": _name("open"), "linger.ms": 5}
    )
    reader = cluster.open_reader()
    try:
        reader.want(topic, 0, 0)
        seen: list[int] = []
        deadline = time.monotonic() + 20
        while len(seen) < 5:
            assert time.monotonic() < deadline, seen
            for read in reader.poll(0.5):
                assert read.error is None, read.error
                seen.extend(m.offset for m in read.records)
                reader.want(topic, 0, read.records[-1].offset + 1)
        assert seen == [0, 1, 2, 8, 9]
        deadline = time.monotonic() + 1.5  # at the marker: five checks' worth
        while time.monotonic() < deadline:
            assert reader.poll(0.2) == []
        assert reader.renewals == 0
        producer.init_transactions(30)  # a transaction left open past the marker
        producer.begin_transaction()
        for key, value in _pairs("open", 2):
            producer.produce(topic, value=value, key=key, partition=0)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert reader.poll(0.2) == []
        assert reader.renewals == 0
        producer.commit_transaction(30)  # now there is something to give: it comes
        deadline = time.monotonic() + 20
        got: list[int] = []
        while len(got) < 2:
            assert time.monotonic() < deadline, got
            for read in reader.poll(0.5):
                got.extend(m.offset for m in read.records)
        assert got == [11, 12]
        assert reader.renewals == 0
    finally:
        reader.close()
        producer.flush(5)


# ------------------------------------------------------------------- a leader that moves


@pytest.mark.kafka_cluster
def test_the_reader_follows_a_new_leader_without_losing_or_repeating_records(
    tmp_path,
) -> None:
    from tests.kafka.conftest import start_cluster

    kafka = start_cluster(tmp_path, nodes=3)
    try:
        topic = _name("moving")
        with NetworkCluster(kafka.bootstrap, timeout=30.0) as cluster:
            cluster.create_topic(topic, 1)
            written = []
            for i in range(5):
                batch = _pairs(f"before{i}", 40, 50)
                cluster_produce(cluster, topic, batch)
                written.extend(batch)
            seen: list[tuple[int, bytes | None, bytes | None]] = []
            offset = _read_some(cluster, topic, 0, seen, stop_at=100)
            assert offset == 100
            leader = kafka.leader(topic, 0)
            kafka.kill(leader)
            for i in range(5):
                batch = _pairs(f"after{i}", 40, 50)
                cluster_produce(cluster, topic, batch)  # librdkafka finds the new leader
                written.extend(batch)
            new_leader = kafka.leader(topic, 0)
            assert new_leader not in (leader, -1)
            offset = _read_some(cluster, topic, offset, seen, stop_at=len(written))
            assert [o for o, _, _ in seen] == list(range(len(written)))
            assert [(k, v) for _, k, v in seen] == written
    finally:
        kafka.stop()


def cluster_produce(cluster: NetworkCluster, topic: str, pairs: Sequence[Pair]) -> None:
    from storage import NewRecord

    records = [NewRecord(value=v, key=k, timestamp=1_000) for k, v in pairs]
    cluster.produce(topic, 0, records, durable=True)


def _read_some(
    cluster: NetworkCluster,
    topic: str,
    offset: int,
    seen: list[tuple[int, bytes | None, bytes | None]],
    stop_at: int,
) -> int:
    """Read as the replay does (retrying what fails) until ``stop_at``; the next offset."""
    deadline = time.monotonic() + 90
    failures = 0
    while offset < stop_at:
        assert time.monotonic() < deadline, f"stuck at {offset} after {failures} failures"
        try:
            cols = coordlog.fetch_columns(cluster, topic, 0, offset, max_bytes=2000, max_wait=0.2)
        except NetworkError:
            failures += 1
            time.sleep(0.1)  # a real cluster electing a leader: no clock to advance
            continue
        keep = [i for i, o in enumerate(cols[0]) if o < stop_at]
        seen.extend((cols[0][i], cols[2][i], cols[3][i]) for i in keep)
        if keep:
            offset = cols[0][keep[-1]] + 1
    return offset


# ------------------------------------------------------------- a fetch past either end


def test_an_out_of_range_fetch_says_where_the_log_starts_and_ends(
    bootstrap: str, cluster: NetworkCluster
) -> None:
    """Kafka answers OFFSET_OUT_OF_RANGE with high watermark -1; the raw reader asks the same
    leader (ListOffsets) so that the replay can tell a log that went back (the end below its
    position) from one whose start moved (the start above it)."""

    topic = _name("bounds")
    cluster.create_topic(topic, partitions=2)
    _produce(bootstrap, topic, [_pairs("a", 7)], partition=0)
    _produce(bootstrap, topic, [_pairs("b", 3)], partition=1)
    assert cluster.delete_records(topic, {0: 4}) == {0: 4}

    past_end = cluster.fetch_batches_many(topic, {0: 50, 1: 40})
    assert past_end is not None
    for p, offset, start, end in ((0, 50, 4, 7), (1, 40, 0, 3)):
        got = past_end[p]
        assert isinstance(got, OffsetOutOfRange), got
        assert (got.offset, got.log_start_offset, got.log_end_offset) == (offset, start, end)
    with pytest.raises(OffsetOutOfRange) as before_start:
        cluster.fetch_batches(topic, 0, 1)
    assert (before_start.value.log_start_offset, before_start.value.log_end_offset) == (4, 7)
    assert cluster.log_bounds(topic, 0) == (4, 7)
    assert cluster.log_bounds(topic, 1) == (0, 3)


def test_where_a_leader_epoch_ends_is_asked_of_the_leader(bootstrap: str, cluster) -> None:
    """OffsetForLeaderEpoch (KIP-320), what the member reader asks after a leader change:
    the epoch the records were written under ends at the log end, and one past the
    leader's own cannot be told by that node (Kafka answers -1: an error to ask again with,
    never a cut at -1 nor "not cut"); the records carry their epoch, as librdkafka reports
    it."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition

    topic = _name("epochs")
    cluster.create_topic(topic, partitions=2)
    _produce(bootstrap, topic, [_pairs("a", 5)], partition=0)
    _produce(bootstrap, topic, [_pairs("b", 3)], partition=1)
    reader = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": _name("g")})
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        got = reader.consume(5, 10)
        epochs = {m.leader_epoch() for m in got if m.error() is None}
    finally:
        reader.close()
    assert len(epochs) == 1 and None not in epochs, epochs
    (epoch,) = epochs
    assert cluster.epoch_end(topic, 0, epoch) == 5
    with pytest.raises(NetworkError, match="cannot say where leader epoch"):
        cluster.epoch_end(topic, 0, epoch + 7)
    # many at once (a member's starts: one request per leader), each told apart
    assert cluster.epoch_ends(topic, {0: epoch, 1: epoch}) == {0: 5, 1: 3}
    ends = cluster.epoch_ends(topic, {0: epoch, 1: epoch + 7, 2: epoch})
    assert ends[0] == 5 and "cannot say" in str(ends[1]), ends
    assert isinstance(ends[2], UnknownPartition), ends
    # each ask on a connection of its own, to the leader fresh metadata names: a replay
    # connection kept to a frozen ex-leader waited out the cluster's timeout per partition
    assert not any(key[0] == topic for key in cluster._batch_readers)


def test_a_member_read_tells_kafkas_high_watermark(cluster: NetworkCluster, bootstrap: str) -> None:
    """The member's reader tells each answer's log end (librdkafka's high watermark from
    Kafka's fetch answer), which AMO reserves up to ahead of what it fetched: the end of
    the log, not of what one answer brought."""
    topic = _name("ends")
    cluster.create_topic(topic, 1)
    _produce(bootstrap, topic, [_pairs("a", 10, 1000), _pairs("b", 10, 1000)])
    reader = cluster.open_reader(max_bytes=1)  # (a batch an answer)
    try:
        reader.want(topic, 0, 0)
        ends: list[int] = []
        deadline = time.monotonic() + 30
        while not ends or ends[-1] < 25:
            assert time.monotonic() < deadline, ends
            for read in reader.poll(0.2):
                assert read.error is None, read.error
                ends.append(read.log_end)
                if len(ends) == 1:  # the first answer: the log's end is 20
                    assert read.log_end == 20
                    _produce(bootstrap, topic, [_pairs("c", 5)])
                reader.want(topic, 0, read.records[-1].offset + 1)
        assert ends[0] == 20 and ends[-1] == 25 and ends == sorted(ends), ends
    finally:
        reader.close()
