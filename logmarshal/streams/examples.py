"""The KIP-28 word count (processor API) and a windowed count (DSL), as runnable topologies:
``logmarshal streams run logmarshal.streams.examples:word_count`` and the streams demo."""

from __future__ import annotations

from .dsl import StreamsBuilder, TimeWindows
from .processor import STREAM_TIME, Processor, ProcessorContext, StreamRecord
from .serde import string_deserializer, string_serializer
from .stores import StoreSpec
from .topology import Topology

__all__ = ["WordCountProcessor", "windowed_count", "word_count", "word_count_dsl"]


class WordCountProcessor(Processor):
    """KIP-28's example: count words of every line in a store; every ``interval_ms`` of
    stream time forward the counts changed since the last punctuation."""

    interval_ms = 1000

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store = context.get_state_store("counts")
        self.changed: set[str] = set()
        context.schedule(self.interval_ms, STREAM_TIME, self.punctuate)

    def process(self, record: StreamRecord) -> None:
        for word in (record.value or "").lower().split():
            self.store.put(word, (self.store.get(word) or 0) + 1)
            self.changed.add(word)

    def punctuate(self, timestamp: int) -> None:
        for word in sorted(self.changed):
            self.context.forward(word, self.store.get(word))
        self.changed.clear()


def word_count(
    source: str = "lines", sink: str = "word-counts", store_kind: str = "memory"
) -> Topology:
    """Lines (UTF-8 text values) -> counts per word in store ``counts`` -> ``sink``."""
    return (
        Topology()
        .add_source(
            "lines",
            source,
            value_deserializer=string_deserializer,
            key_deserializer=string_deserializer,
        )
        .add_processor("count", WordCountProcessor, "lines")
        .add_state_store(StoreSpec("counts", store_kind), "count")
        .add_sink("out", sink, "count", key_serializer=string_serializer)
    )


def word_count_dsl(
    source: str = "lines", sink: str = "word-counts", prefix: str = "wordcount"
) -> Topology:
    b = StreamsBuilder(prefix)
    (
        b.stream(
            source, key_deserializer=string_deserializer, value_deserializer=string_deserializer
        )
        .flat_map_values(lambda line: (line or "").lower().split())
        .group_by(lambda _k, word: word)
        .count("counts")
        .to_stream()
        .to(sink)
    )
    return b.build()


def windowed_count(
    source: str = "clicks", sink: str = "clicks-per-minute", window_ms: int = 60_000
) -> Topology:
    """Clicks keyed by user -> clicks per user per tumbling minute of event time."""
    b = StreamsBuilder("windowed")
    (
        b.stream(source)
        .group_by_key()
        .windowed_by(TimeWindows.of(window_ms))
        .count("clicks-per-window")
        .to_stream()
        .to(sink)
    )
    return b.build()
