"""Streams layer (KIP-28): processor topologies with state stores on Marshal tasks."""

from .app import App
from .dsl import KStream, KTable, StreamsBuilder, TimeWindows
from .processor import (
    STREAM_TIME,
    WALL_CLOCK_TIME,
    Processor,
    ProcessorContext,
    PunctuationType,
    StreamRecord,
)
from .stores import (
    InMemoryStore,
    KeyValueStore,
    RocksDBStore,
    SqliteStore,
    StoreDamaged,
    StoreSpec,
    StoreUnavailable,
)
from .task import Task, changelog_topic
from .topology import Topology, TopologyError

__all__ = [
    "STREAM_TIME",
    "WALL_CLOCK_TIME",
    "App",
    "InMemoryStore",
    "KStream",
    "KTable",
    "KeyValueStore",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "RocksDBStore",
    "SqliteStore",
    "StoreDamaged",
    "StoreSpec",
    "StoreUnavailable",
    "StreamRecord",
    "StreamsBuilder",
    "Task",
    "TimeWindows",
    "Topology",
    "TopologyError",
    "changelog_topic",
]
