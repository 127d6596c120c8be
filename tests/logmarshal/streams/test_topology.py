import re

import pytest

from logmarshal.streams import Processor, StoreSpec, Topology, TopologyError


class Passthrough(Processor):
    def process(self, record):
        self.context.forward(record.key, record.value)


def base() -> Topology:
    return Topology().add_source("src", "in").add_processor("p", Passthrough, "src")


def test_valid_topology_describes_its_nodes():
    t = base().add_sink("out", "out-topic", "p")
    t.add_state_store(StoreSpec("s"), "p")
    t.validate()
    text = t.describe()
    assert "Source: src (topics: [in]) --> p" in text
    assert "Processor: p (stores: [s]) --> out <-- src" in text
    assert "Sink: out (topic: out-topic) <-- p" in text


def test_unknown_parent():
    t = base().add_processor("q", Passthrough, "nope")
    with pytest.raises(TopologyError, match="'q': unknown parent 'nope'"):
        t.validate()


def test_cycle():
    t = Topology().add_source("src", "in")
    t.add_processor("a", Passthrough, ["src", "c"])
    t.add_processor("b", Passthrough, "a")
    t.add_processor("c", Passthrough, "b")
    with pytest.raises(TopologyError, match="cycle: a -> b -> c -> a"):
        t.validate()


def test_store_nobody_uses():
    t = base().add_state_store(StoreSpec("lonely"))
    with pytest.raises(TopologyError, match="store 'lonely' is connected to no processor"):
        t.validate()


def test_store_connected_to_unknown_processor():
    t = base().add_state_store(StoreSpec("s"), "ghost")
    with pytest.raises(TopologyError, match="store 's': unknown processor 'ghost'"):
        t.validate()


def test_sink_cannot_be_a_parent():
    t = base().add_sink("out", "o", "p").add_processor("q", Passthrough, "out")
    with pytest.raises(TopologyError, match="parent 'out' is a sink"):
        t.validate()


def test_duplicate_names_and_bad_arguments():
    with pytest.raises(TopologyError, match="already exists"):
        base().add_processor("p", Passthrough, "src")
    with pytest.raises(TopologyError, match="needs topic names"):
        Topology().add_source("s", [])
    with pytest.raises(TopologyError, match="factory must be callable"):
        Topology().add_processor("p", 3, "s")  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="no source"):
        Topology().validate()
    with pytest.raises(ValueError):
        StoreSpec("s", "rocks")


def test_source_without_children():
    with pytest.raises(TopologyError, match="source 'src' has no children"):
        Topology().add_source("src", "in").validate()


def test_sources_not_copartitioned(cluster):
    cluster.create_topic("a", 2)
    cluster.create_topic("b", 3)
    t = Topology().add_source("sa", "a").add_source("sb", "b")
    t.add_processor("join", Passthrough, ["sa", "sb"])
    with pytest.raises(TopologyError, match="not co-partitioned: a has 2, b has 3"):
        t.check_copartitioned(cluster)


def test_missing_source_topic(cluster):
    with pytest.raises(TopologyError, match="source topic 'in' does not exist"):
        base().check_copartitioned(cluster)


def test_pattern_sources_resolve_against_the_cluster(cluster):
    for name in ("logs-a", "logs-b", "other"):
        cluster.create_topic(name, 2)
    t = Topology().add_source("src", re.compile(r"logs-.*")).add_processor("p", Passthrough, "src")
    (sub,) = t.check_copartitioned(cluster)
    assert sub.source_topics == ("logs-a", "logs-b")


def test_store_shared_by_processors_joins_their_subtopologies():
    t = Topology().add_source("s1", "a").add_source("s2", "b")
    t.add_processor("p1", Passthrough, "s1").add_processor("p2", Passthrough, "s2")
    assert len(t.subtopologies()) == 2
    t.add_state_store(StoreSpec("shared"), "p1", "p2")
    (sub,) = t.subtopologies()
    assert sub.source_topics == ("a", "b") and sub.stores == ("shared",)


def test_a_stream_record_is_immutable_with_defaults_and_a_changed_copy():
    from logmarshal.streams import StreamRecord

    r = StreamRecord(key="k", value=1, timestamp=5)
    assert (r.topic, r.partition, r.offset, r.headers) == (None, -1, -1, ())
    with pytest.raises(AttributeError):
        r.value = 2
    assert r._replace(value=2) == StreamRecord("k", 2, 5) and r.value == 1


def test_a_topic_has_one_source():
    """Kafka Streams refuses a topic registered by a second source. Here the second source
    of one sub-topology never got a record, one of two sub-topologies was dropped by the test
    driver, and the App failed only once it had made its changelogs (an attack on the DSL,
    2026-12-06)."""
    t = Topology().add_source("a", "in")
    with pytest.raises(TopologyError, match="topic 'in' is read by source 'a' already"):
        t.add_source("b", ["other", "in"])
    with pytest.raises(TopologyError, match="topic 'x' is read by source 'c' already"):
        Topology().add_source("c", ["x", "x"])
    from logmarshal.streams import StreamsBuilder

    builder = StreamsBuilder("dup")
    builder.stream("in")
    with pytest.raises(TopologyError, match="topic 'in' is read by source"):
        builder.stream("in")
