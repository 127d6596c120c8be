"""The member reader's check that a data log was not cut under it (``network/epochs.py``,
KIP-320), over a scripted leader: when it asks, and what it concludes."""

from __future__ import annotations

import logging

from logmarshal.errors import NetworkError
from logmarshal.network.epochs import EpochWatch

K = ("events", 0)


class Leader:
    """Where each leader epoch's log ends now; ``fail``: the next ask raises."""

    def __init__(self, ends: dict[int, int | None]) -> None:
        self.ends = ends
        self.asked: list[int] = []
        self.fail: Exception | None = None

    def __call__(self, topic: str, partition: int, epoch: int) -> int | None:
        self.asked.append(epoch)
        if self.fail is not None:
            raise self.fail
        return self.ends.get(epoch)


def test_records_under_the_same_epoch_ask_nothing() -> None:
    leader = Leader({})
    watch = EpochWatch(leader)
    assert watch.read(K, 0, 3, 100) is None
    assert watch.read(K, 100, 3, 200) is None
    assert leader.asked == []


def test_a_newer_epoch_asks_where_the_last_one_ends() -> None:
    # a clean leader change: epoch 3's log ends where the reader is (or further)
    leader = Leader({3: 200})
    watch = EpochWatch(leader)
    watch.read(K, 0, 3, 200)
    assert watch.read(K, 200, 4, 250) is None
    assert leader.asked == [3]
    # a cut: epoch 4's log ends at 230 now, below the reader at 250
    leader.ends[4] = 230
    assert watch.read(K, 250, 5, 300) == 230
    assert leader.asked == [3, 4]
    # what is read from the cut on, of a newer epoch, asks again: not cut again
    assert watch.read(K, 230, 5, 280) is None
    assert leader.asked == [3, 4, 4]
    assert watch.read(K, 280, 5, 300) is None  # (the same epoch: nothing asked)
    assert leader.asked == [3, 4, 4]


def test_a_second_cut_below_the_first_before_anything_was_read_again_is_told() -> None:
    # epoch 4's log is cut at 230, below the reader at 250; before it read anything from
    # 230, a second unclean election cuts the log at 210 and the leader writes on under
    # epoch 6: the records read from 230 are of epoch 6, and 210..229 were written since
    leader = Leader({4: 230})
    watch = EpochWatch(leader)
    watch.read(K, 0, 4, 250, first=(0, 4))
    assert watch.read(K, 250, 5, 300) == 230
    leader.ends[4] = 210
    assert watch.read(K, 230, 6, 280) == 210
    assert watch.epoch_of(K, 205) == 4  # (read before both cuts, below them)


def test_a_refused_fetch_asks_only_at_or_below_what_was_read() -> None:
    leader = Leader({3: 150})
    watch = EpochWatch(leader)
    watch.read(K, 0, 3, 200)
    assert watch.refused(K, 250) is None  # past what was read: epoch 3 says nothing there
    assert leader.asked == []
    assert watch.refused(K, 200) == 150
    watch.read(K, 0, 3, 200)
    watch.assigned(K, 300)  # read again from past it: forgotten
    assert watch.refused(K, 200) is None
    watch.read(K, 0, 3, 200)
    watch.forget(K)  # the partition dropped
    assert watch.refused(K, 200) is None


def test_an_unknown_end_or_no_leader_answer_is_no_cut(caplog) -> None:
    leader = Leader({3: None})
    watch = EpochWatch(leader)
    watch.read(K, 0, 3, 200)
    assert watch.read(K, 200, 4, 220) is None  # (logmarshal's broker, -1 from Kafka)
    leader.fail = OSError("refused")
    with caplog.at_level(logging.WARNING):
        failed = watch.read(K, 220, 5, 240)
    assert isinstance(failed, NetworkError) and "cannot ask" in caplog.text
    leader.fail, leader.ends[4] = None, 210  # asked again when the records come again
    assert watch.read(K, 220, 5, 240) == 210


def test_records_without_an_epoch_or_a_reader_without_a_leader_ask_nothing() -> None:
    leader = Leader({3: 0})
    watch = EpochWatch(leader)
    watch.read(K, 0, 3, 10)
    assert watch.read(K, 10, None, 20) is None  # (an old message format: nothing to tell by)
    assert watch.read(K, 20, 9, 30) is None  # (so nothing was kept to compare with)
    assert leader.asked == []
    blind = EpochWatch(None)
    blind.read(K, 0, 3, 10)
    assert blind.read(K, 10, 9, 20) is None and blind.refused(K, 10) is None


def test_the_newest_epoch_of_the_records_tells() -> None:
    """The first records may be ones read again after a re-assign, of the old epoch: the
    last ones' epoch decides whether the leader is asked."""
    leader = Leader({3: 120})
    watch = EpochWatch(leader)
    watch.read(K, 0, 3, 200)
    assert watch.read(K, 200, 4, 260) == 120
    assert leader.asked == [3]


def test_logmarshals_broker_is_never_asked(tmp_path) -> None:
    """Its partitions have one copy: no election cuts them, and it does not serve the
    request. ``epoch_end`` is None without a request sent."""
    from logmarshal.network import NetworkCluster
    from storage.broker import BrokerConfig, BrokerThread

    with BrokerThread(BrokerConfig(data_dir=tmp_path / "b", port=0)) as broker:
        cluster = NetworkCluster(broker.bootstrap, timeout=5.0)
        try:
            cluster.create_topic("t", 1)
            assert cluster.epoch_end("t", 0, 0) is None
            assert cluster.epoch_ends("t", {0: 0}) == {0: None}
            assert not cluster._batch_readers  # (no connection made for it)
        finally:
            cluster.close()


def test_a_leader_that_never_answers_stops_nothing_for_good(caplog) -> None:
    """Asks that keep failing (a broker without OffsetForLeaderEpoch v3, a leader that keeps
    dropping the connection) are given up after ``ASKS``: reading goes on unchecked, said
    once, rather than the partition retrying for good."""
    from logmarshal.network.epochs import ASKS

    leader = Leader({})
    leader.fail = OSError("closed")
    watch = EpochWatch(leader)
    watch.read(K, 0, 3, 200)
    with caplog.at_level(logging.WARNING):
        answers = [watch.refused(K, 200) for _ in range(ASKS)]
    assert all(isinstance(a, NetworkError) for a in answers[:-1]) and answers[-1] is None
    assert "reading on without telling whether the log was cut below 200" in caplog.text
    assert watch.refused(K, 200) is None and len(leader.asked) == ASKS  # (nothing to ask)


def _leader_answering(answer) -> tuple[str, int]:
    """A TCP server on 127.0.0.1 answering OffsetForLeaderEpoch v3 requests with
    ``answer(epoch) -> (error code, epoch found, end offset)`` (a daemon thread each)."""
    import socket
    import struct
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve(conn: socket.socket) -> None:
        with conn:
            while len(head := conn.recv(4)) == 4:
                (size,) = struct.unpack(">i", head)
                body = b""
                while len(body) < size:
                    body += conn.recv(size - len(body))
                correlation = struct.unpack_from(">i", body, 4)[0]
                pos = 10 + struct.unpack_from(">h", body, 8)[0] + 8  # client id, head
                length = struct.unpack_from(">h", body, pos)[0]
                name = body[pos + 2 : pos + 2 + length]
                partition, _, epoch = struct.unpack_from(">iii", body, pos + 2 + length + 4)
                code, found, end = answer(epoch)
                out = (
                    struct.pack(">iii", correlation, 0, 1) + struct.pack(">h", length) + name
                    + struct.pack(">i", 1) + struct.pack(">hiiq", code, partition, found, end)
                )  # fmt: skip
                conn.sendall(struct.pack(">i", len(out)) + out)

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server.getsockname()


def test_a_node_that_is_not_the_leader_cannot_say_not_cut() -> None:
    """A stale leader's error code (NOT_LEADER_OR_FOLLOWER, metadata not updated yet) was
    answered None, taken for "not cut": the watch then held the new epoch, and the true
    leader, asked a moment later, was never asked (a helper's attack: 1000..1499 skipped).
    Now it is an error: the records are read again and the leader asked again."""
    from logmarshal.network.fetch_client import _BatchReader

    stale = _leader_answering(lambda epoch: (6, -1, -1))  # NOT_LEADER_OR_FOLLOWER
    past_own = _leader_answering(lambda epoch: (0, -1, -1))  # an epoch past its own
    true = _leader_answering(lambda epoch: (0, epoch, 1000))  # cut at 1000
    leader = [stale]
    reader = _BatchReader("events", (0,), lambda: leader[0], 5.0, None)
    watch = EpochWatch(lambda topic, partition, epoch: reader.epoch_end(partition, epoch))
    try:
        watch.read(K, 0, 5, 1500)  # 0..1499 read under epoch 5
        for node in (stale, past_own):
            leader[0] = node
            assert isinstance(watch.read(K, 1500, 6, 1600), NetworkError)
        leader[0] = true
        assert watch.read(K, 1500, 6, 1600) == 1000
    finally:
        reader.close()


class _Record:
    """What the reader reads of a librdkafka message here: its offset and leader epoch."""

    def __init__(self, offset: int, epoch: int) -> None:
        self._offset, self._epoch = offset, epoch

    def offset(self) -> int:
        return self._offset

    def leader_epoch(self) -> int:
        return self._epoch


class _Librdkafka:
    def incremental_assign(self, partitions) -> None: ...

    def incremental_unassign(self, partitions) -> None: ...

    def close(self) -> None: ...


def _reader(epoch_end, watermarks):
    """A member reader over a scripted librdkafka, having read 0..499 under epoch 0."""
    from logmarshal.network.readers import _Reader

    reader = _Reader({"bootstrap.servers": "127.0.0.1:1", "group.id": "x"}, 5.0, 1 << 20,
                     lambda keys: {}, log_ends=lambda keys, timeout: {},
                     epoch_end=epoch_end)  # fmt: skip
    reader._consumer.close()
    reader._consumer = _Librdkafka()
    reader._watermarks = watermarks
    reader.want(*K, 500)
    assert not reader._cut_under(K, _Record(499, 0), _Record(499, 0))
    return reader


def test_a_cut_is_told_when_the_bounds_cannot_be_read() -> None:
    """The watch forgets the epoch once it finds a cut; an error for the bounds (read only
    to fill the answer, just after a leader change) lost the cut for good (a helper's
    attack): the retry read the new epoch's records as fresh. The cut is told without them."""
    from logmarshal.errors import LogTruncated

    def watermarks(topic: str, partition: int) -> tuple[int, int]:
        raise NetworkError("timed out (the leader moving)")

    reader = _reader(lambda topic, partition, epoch: 300, watermarks)
    assert reader._cut_under(K, _Record(899, 1), _Record(899, 1))
    told = reader._errors[K]
    assert isinstance(told, LogTruncated) and told.divergence == 300, told


def test_one_burst_of_records_asks_once() -> None:
    """After a failed ask the partition stays assigned in librdkafka, and each batch it gave
    before the fetcher's retry asked again: one burst spent every ask a failing leader is
    allowed, the watch gave up, and the retry read the cut log unchecked (a helper's
    attack). Records of a partition with an error on hand are dropped unasked."""
    asks: list[int] = []
    up = [False]

    def epoch_end(topic: str, partition: int, epoch: int) -> int:
        asks.append(epoch)
        if not up[0]:
            raise NetworkError("connection refused (the old leader)")
        return 300

    reader = _reader(epoch_end, lambda topic, partition: (0, 2000))
    assert all(
        reader._cut_under(K, _Record(599 + 100 * i, 1), _Record(599 + 100 * i, 1)) for i in range(6)
    )
    assert len(asks) == 1
    up[0] = True
    reader._answers()  # the fetcher takes the error, backs off and asks for 500 again
    reader.want(*K, 500)
    assert reader._cut_under(K, _Record(899, 1), _Record(899, 1))
    assert reader._errors[K].divergence == 300 and len(asks) == 2


def test_the_epoch_of_each_offset_read_is_known_for_the_mirror() -> None:
    """The offsets mirror commits the epoch of the record before a position: known for the
    records read since the epoch's first one read, not before, nor past what was read."""
    watch = EpochWatch(Leader({3: 250}))
    watch.read(K, 100, 3, 200, first=(100, 3))
    assert [watch.epoch_of(K, o) for o in (99, 100, 199, 200)] == [None, 3, 3, None]
    watch.read(K, 200, 3, 250, first=(200, 3))  # (on from there: one run of epoch 3)
    assert watch.epoch_of(K, 100) == 3 and watch.epoch_of(K, 249) == 3
    watch.read(K, 250, 4, 300, first=(250, 3))  # a batch across a leader change at some offset
    assert watch.epoch_of(K, 299) == 4 and watch.epoch_of(K, 298) is None
    # a position still in the older stretch (read ahead past the change): known still
    assert watch.epoch_of(K, 249) == 3 and watch.epoch_of(K, 100) == 3
    watch.read(K, 300, 4, 350, first=(300, 4))
    assert watch.epoch_of(K, 299) == 4 and watch.epoch_of(K, 349) == 4
    watch.read(K, 350, 5, 400)  # (the first record not given: only the last is known)
    assert watch.epoch_of(K, 399) == 5 and watch.epoch_of(K, 398) is None
    watch.forget(K)
    assert watch.epoch_of(K, 399) is None


def test_the_first_record_read_since_a_drop_is_kept_for_the_start_check() -> None:
    watch = EpochWatch(Leader({}))
    assert watch.first_read(K) is None
    watch.read(K, 100, 4, 200, first=(100, 3))
    watch.read(K, 200, 4, 300, first=(200, 4))
    assert watch.first_read(K) == (100, 3)
    watch.forget(K)  # (dropped: the next claim's first records)
    watch.read(K, 500, 6, 600)
    assert watch.first_read(K) == (599, 6)  # (only the last record told)


def test_records_of_a_partition_dropped_meanwhile_are_not_remembered() -> None:
    """A batch delivered after its partition was dropped: neither kept nor its epochs
    remembered (a later claim's start check took its first record for the claim's own)."""
    reader = _reader(lambda topic, partition, epoch: None, lambda topic, partition: (0, 900))
    reader.drop(*K)
    assert reader._cut_under(K, _Record(500, 4), _Record(599, 4))
    assert reader.first_read(*K) is None and reader.epoch_of(*K, 599) is None
