"""The one-partition reader (``network.partition_reader._PartitionReader``) over a scripted librdkafka:
offsets that hold no record to hand out (transaction markers, aborted records) and the
position librdkafka answers right after an assign, in the orders a real one produces them
only now and then (tests/kafka/test_reader.py has the same reads on Apache Kafka).

The script: the log's records and its high watermark; each consume or poll fetches the next
``step`` offsets; librdkafka's position moves past offsets without a record when that
fetch is served; for ``stale_calls`` calls after an assign nothing is served and
``position()`` still answers the position from before it.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Message as KafkaMessage
from confluent_kafka import TopicPartition

from logmarshal.cluster import PastMarkers
from logmarshal.network import partition_reader as readers

TOPIC = "t"
_INVALID = -1001  # librdkafka's OFFSET_INVALID: no position yet


class ScriptedLibrdkafka:
    """What ``_PartitionReader`` calls of a confluent-kafka Consumer."""

    def __init__(self, records: set[int], high: int, step: int, stale_calls: int) -> None:
        self.records, self.high, self.step, self.stale_calls = records, high, step, stale_calls
        self.cursor = 0
        self.position_ = _INVALID
        self.old: int | None = None  # the position answered until the assign is served
        self.calls_to_serve = 0
        self.queue: list[KafkaMessage | int] = []  # a message, or where a skip ends
        self.assigns = 0

    def assign(self, tps: list[TopicPartition]) -> None:
        (tp,) = tps
        self.assigns += 1
        self.old, self.cursor, self.queue = self.position_, tp.offset, []
        self.position_ = _INVALID
        self.calls_to_serve = self.stale_calls

    def _fetched(self) -> bool:
        if self.calls_to_serve:
            self.calls_to_serve -= 1
            return False
        self.old = None
        end = min(self.cursor + self.step, self.high)
        for offset in range(self.cursor, end):
            if offset in self.records:
                self.queue.append(
                    KafkaMessage(
                        topic=TOPIC,
                        partition=0,
                        offset=offset,
                        key=b"k",
                        value=b"%d" % offset,
                        timestamp=(1, 1000 + offset),
                    )
                )
        if end > self.cursor and (not self.queue or not isinstance(self.queue[-1], int)):
            self.queue.append(end)  # served after the records: the position moves to end
        self.cursor = max(self.cursor, end)
        return True

    def _serve(self, n: int) -> list[KafkaMessage]:
        out = []
        while self.queue and len(out) < n:
            op = self.queue.pop(0)
            if isinstance(op, int):
                self.position_ = op
            else:
                out.append(op)
                self.position_ = op.offset() + 1
        while self.queue and isinstance(self.queue[0], int):  # markers right after them
            self.position_ = self.queue.pop(0)
        return out

    def consume(self, n: int, timeout: float) -> list[KafkaMessage]:
        if not self.queue:
            self._fetched()
        return self._serve(n)

    def poll(self, timeout: float) -> KafkaMessage | None:
        if not self.queue:
            self._fetched()
        got = self._serve(1)
        return got[0] if got else None

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        at = self.old if self.old is not None else self.position_
        return [TopicPartition(TOPIC, 0, at)]

    def get_watermark_offsets(self, tp, timeout=None, cached=False) -> tuple[int, int]:
        return 0, self.high

    def close(self) -> None:
        pass


@pytest.fixture
def scripted(monkeypatch):
    """``make(records, high, step, stale_calls)``: a reader whose librdkafka consumers are
    scripted so (each new one is appended to ``made``)."""
    made: list[ScriptedLibrdkafka] = []
    monkeypatch.setattr(readers, "_STALE_POSITION_WAIT", 0.05)

    def make(records, high, step=100, stale_calls=0):
        def consumer(conf):
            made.append(ScriptedLibrdkafka(set(records), high, step, stale_calls))
            return made[-1]

        monkeypatch.setattr(readers, "Consumer", consumer)
        return readers._PartitionReader({}, TOPIC, 0)

    make.made = made
    return make


def _offsets(got) -> list[int] | PastMarkers:
    return got if isinstance(got, PastMarkers) else got[0]


def test_records_after_markers_that_came_in_an_answer_of_their_own_are_waited_for(scripted):
    """Markers and an aborted transaction at 3..7, then records: librdkafka passes the first
    fetch's offsets without a record, and the records come with the next. A read from 3
    answers them, not nothing: ``fetch()`` (the CLI's read) stops at an answer of nothing."""
    reader = scripted({0, 1, 2, 8, 9}, high=11, step=4)
    assert [m.offset for m in reader.fetch(3, 1 << 20, 0.0)] == [8, 9]
    reader = scripted({0, 1, 2, 8, 9}, high=11, step=4)
    assert _offsets(reader.fetch_columns(3, 1 << 20, 0.0)) == [8, 9]


def test_offsets_without_a_record_to_the_end_answer_where_they_end(scripted):
    reader = scripted(set(range(10)), high=11)
    assert _offsets(reader.fetch_columns(10, 1 << 20, 0.0)) == PastMarkers(11)
    # and again, from inside them: no seek back (one librdkafka consumer, one assign)
    assert _offsets(reader.fetch_columns(10, 1 << 20, 0.0)) == PastMarkers(11)
    assert reader.fetch(10, 1 << 20, 0.0) == []
    assert [c.assigns for c in scripted.made] == [1]


def test_the_position_from_before_a_seek_is_not_taken_for_the_new_one(scripted):
    """After the read at the marker librdkafka's position is 11; a read from 0 seeks, and
    for a call librdkafka still answers 11. Taken for the new assignment's, it made the
    read answer PastMarkers(11): every record skipped."""
    reader = scripted(set(range(10)), high=11, stale_calls=1)
    assert _offsets(reader.fetch_columns(10, 1 << 20, 0.0)) == PastMarkers(11)
    assert _offsets(reader.fetch_columns(0, 1 << 20, 0.0)) == list(range(10))


def test_a_position_that_stays_the_old_one_is_settled_by_a_new_consumer(scripted):
    """Seeking back into offsets without a record, where the true position equals the one
    before the seek and librdkafka was never seen reset: a new consumer, which has no old
    position, tells, after ``_STALE_POSITION_WAIT`` (the stall watchdog would have after
    10 s, with a warning that librdkafka stopped fetching)."""
    reader = scripted({0, 1, 2}, high=11, stale_calls=1)
    assert _offsets(reader.fetch_columns(5, 1 << 20, 0.0)) == PastMarkers(11)
    assert _offsets(reader.fetch_columns(1, 1 << 20, 0.0)) == [1, 2]
    assert _offsets(reader.fetch_columns(4, 1 << 20, 0.0)) == PastMarkers(11)
    assert len(scripted.made) == 2
    assert reader.renewals == 0  # not reported as librdkafka's stall (nor waited 10 s for)
