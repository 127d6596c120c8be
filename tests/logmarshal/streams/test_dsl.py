"""DSL operators against hand-computed results, through the topology test driver."""

from logmarshal.clock import ManualClock
from logmarshal.streams import (
    STREAM_TIME,
    WALL_CLOCK_TIME,
    Processor,
    StoreSpec,
    StreamsBuilder,
    TimeWindows,
    Topology,
)
from logmarshal.streams.examples import windowed_count, word_count, word_count_dsl
from logmarshal.streams.serde import string_deserializer, string_serializer
from logmarshal.streams.testing import TopologyTestDriver


def test_stateless_operators():
    b = StreamsBuilder()
    seen = []
    s = b.stream("in")
    (
        s.filter(lambda k, v: v % 2 == 0)
        .map_values(lambda v: v * 10)
        .peek(lambda k, v: seen.append((k, v)))
        .map(lambda k, v: (v, k))
        .to("out")
    )
    s.flat_map(lambda k, v: [(k, v)] * v).to("repeated")
    d = TopologyTestDriver(b.build())
    for i in range(1, 5):
        d.pipe("in", f"k{i}", i)
    assert d.read("out") == [(20, "k2"), (40, "k4")]
    assert seen == [("k2", 20), ("k4", 40)]
    assert d.read("repeated") == [
        ("k1", 1),
        ("k2", 2),
        ("k2", 2),
        ("k3", 3),
        ("k3", 3),
        ("k3", 3),
        ("k4", 4),
        ("k4", 4),
        ("k4", 4),
        ("k4", 4),
    ]


def test_branch_and_merge():
    b = StreamsBuilder()
    small, big = b.stream("in").branch(lambda k, v: v < 10, lambda k, v: v < 100)
    small.map_values(lambda v: -v).merge(big).to("out")
    d = TopologyTestDriver(b.build())
    for v in (5, 50, 500, 7):
        d.pipe("in", "k", v)
    assert d.read("out") == [("k", -5), ("k", 50), ("k", -7)]  # 500 matches no branch


def test_through_continues_from_the_topic():
    b = StreamsBuilder()
    b.stream("in").map_values(lambda v: v + 1).through("mid").map_values(lambda v: v * 2).to("out")
    d = TopologyTestDriver(b.build())
    d.pipe("in", "a", 1)
    assert d.read("mid") == [("a", 2)]
    assert d.read("out") == [("a", 4)]
    assert len(d.tasks) == 2  # through splits the topology


def test_group_by_repartitions_then_counts_reduces_aggregates():
    b = StreamsBuilder("app")
    words = b.stream("in").flat_map_values(lambda line: line.split())
    grouped = words.group_by(lambda _k, w: w)
    grouped.count("counts")
    words.group_by(lambda _k, w: len(w)).reduce(lambda a, w: max(a, w), "longest-by-len")
    words.group_by(lambda _k, w: w[0]).aggregate(lambda: "", lambda _k, w, acc: acc + w, "concat")
    topo = b.build()
    assert any(t.endswith("-repartition") for t in topo.internal_topics)
    d = TopologyTestDriver(topo)
    d.pipe("in", None, "b a b")
    d.pipe("in", None, "ab b")
    assert d.store("counts") == {"a": 1, "b": 3, "ab": 1}
    assert d.store("longest-by-len") == {1: "b", 2: "ab"}
    assert d.store("concat") == {"a": "aab", "b": "bbb"}


def test_group_by_key_after_map_repartitions_but_not_without():
    b = StreamsBuilder()
    b.stream("in").group_by_key().count("direct")
    b.stream("in2").map(lambda k, v: (v, k)).group_by_key().count("rekeyed")
    topo = b.build()
    assert len(topo.internal_topics) == 1
    d = TopologyTestDriver(topo)
    for k, v in [("x", "p"), ("y", "p"), ("x", "q")]:
        d.pipe("in", k, v)
        d.pipe("in2", k, v)
    d.pipe("in", None, "dropped")  # a null key cannot be grouped
    assert d.store("direct") == {"x": 2, "y": 1}
    assert d.store("rekeyed") == {"p": 2, "q": 1}


def test_tumbling_windowed_count_by_event_time():
    d = TopologyTestDriver(windowed_count(window_ms=60_000))
    for user, ts in [("u1", 0), ("u1", 59_999), ("u2", 30_000), ("u1", 60_000), ("u1", 125_000)]:
        d.pipe("clicks", user, "click", ts)
    assert d.store("clicks-per-window") == {
        ("u1", 0): 2,
        ("u2", 0): 1,
        ("u1", 60_000): 1,
        ("u1", 120_000): 1,
    }
    assert d.read("clicks-per-minute")[-1] == (["u1", 120_000], 1)


def test_word_count_processor_api_and_dsl_agree():
    lines = ["The cat", "the dog and the cat", "a dog"]
    truth = {"the": 3, "cat": 2, "dog": 2, "and": 1, "a": 1}
    for topo in (word_count(), word_count_dsl()):
        d = TopologyTestDriver(topo)
        for i, line in enumerate(lines):
            d.pipe(
                "lines",
                None,
                line.lower(),
                i * 400,
                key_serializer=string_serializer,
                value_serializer=string_serializer,
            )
        assert d.store("counts") == truth


def test_punctuation_by_stream_time():
    fired = []

    class P(Processor):
        def init(self, context):
            super().init(context)
            context.schedule(1000, STREAM_TIME, fired.append)

        def process(self, record):
            pass

    t = Topology().add_source("s", "in").add_processor("p", P, "s")
    d = TopologyTestDriver(t)
    for ts in (5000, 5500, 5999, 4000, 6000, 6100, 9500):
        d.pipe("in", "k", 1, ts)
    # first record starts stream time at 5000; due at 6000, then every 1000 of stream
    # time; an out-of-order record (4000) does not move stream time; a jump fires once
    assert fired == [6000, 9500]


def test_punctuation_by_wall_clock_on_the_injected_clock():
    clock = ManualClock(start=100.0)
    fired = []

    class P(Processor):
        def init(self, context):
            super().init(context)
            self.cancel = context.schedule(2000, WALL_CLOCK_TIME, fired.append)

        def process(self, record):
            if record.value == "stop":
                self.cancel.cancel()

    t = Topology().add_source("s", "in").add_processor("p", P, "s")
    d = TopologyTestDriver(t, now_ms=clock.time_ms)
    assert d.advance_wall_clock() == 0
    clock.advance(1.999)
    assert d.advance_wall_clock() == 0
    clock.advance(0.001)
    assert d.advance_wall_clock() == 1 and fired == [102_000]
    clock.advance(5.0)  # 3 intervals passed: fires once, next due aligned at 108 s
    assert d.advance_wall_clock() == 1 and fired == [102_000, 107_000]
    clock.advance(1.0)
    assert d.advance_wall_clock() == 1 and fired[-1] == 108_000
    d.pipe("in", "k", "stop")
    clock.advance(10.0)
    assert d.advance_wall_clock() == 0


def test_context_exposes_record_metadata_and_guards_stores():
    seen = []

    class P(Processor):
        def init(self, context):
            super().init(context)

        def process(self, record):
            c = self.context
            seen.append((c.topic, c.partition, c.offset, c.timestamp, c.headers, c.task_id))
            try:
                c.get_state_store("other")
            except Exception as exc:
                seen.append(type(exc).__name__)

    class Q(Processor):
        def process(self, record):
            pass

    t = Topology().add_source("s", "in").add_processor("p", P, "s").add_processor("q", Q, "s")
    t.add_state_store(StoreSpec("other"), "q")
    d = TopologyTestDriver(t)
    d.pipe("in", "k", 1, 42)
    d.pipe("in", "k", 2, 43)
    assert seen == [
        ("in", 0, 0, 42, (), "0_0"),
        "TopologyError",
        ("in", 0, 1, 43, (), "0_0"),
        "TopologyError",
    ]


def test_windows_validate():
    import pytest

    for size in (0, -5, 2.5, "10", True, 2**63):  # (True was 1 ms; 2**63 no int64)
        with pytest.raises(ValueError, match="a window size is a positive int"):
            TimeWindows.of(size)
    assert TimeWindows.of(10).start(25) == 20
    assert TimeWindows.of(2**63 - 1).start(-1) == -(2**63 - 1)
    assert string_deserializer(b"x") == "x"
