"""logmarshal: consumers that share a log's partitions with no coordinator.

The library API::

    import logmarshal
    cluster = logmarshal.connect(data_dir="data")           # embedded; no server needed
    cluster.create_topic("events", partitions=4)
    with logmarshal.Producer(cluster) as producer:
        producer.send("events", b"hello", key=b"user-1").result()
    cluster.fetch("events", 0, offset=0)
"""

from storage import NewRecord, TimestampType, TopicConfig

from ._extensions import warn_if_missing
from .clock import Clock, ManualClock, SystemClock
from .cluster import Cluster, Message, ProduceResult, TopicDescription
from .connect import connect
from .consumer import Consumer, NoPosition
from .embedded import EmbeddedCluster
from .errors import (
    ClosedError,
    ConsumerFailed,
    LogmarshalError,
    NetworkError,
    OffsetOutOfRange,
    RetriableError,
    StorageError,
    UnknownPartition,
    UnknownTopic,
)
from .marshaler import COORDINATION_TOPIC, CoordinationTopicError, Landed, Marshaler
from .metrics import MarshalerMetrics
from .partitioners import Mmh3Partitioner, Murmur2Partitioner, RoundRobinPartitioner, murmur2
from .producer import Producer, RecordMetadata
from .retry import HandlerFailed, RetryPolicy

warn_if_missing()

__all__ = [
    "COORDINATION_TOPIC",
    "Clock",
    "ClosedError",
    "Cluster",
    "Consumer",
    "ConsumerFailed",
    "CoordinationTopicError",
    "EmbeddedCluster",
    "HandlerFailed",
    "Landed",
    "LogmarshalError",
    "ManualClock",
    "Marshaler",
    "MarshalerMetrics",
    "Message",
    "Mmh3Partitioner",
    "Murmur2Partitioner",
    "NetworkError",
    "NewRecord",
    "NoPosition",
    "OffsetOutOfRange",
    "ProduceResult",
    "Producer",
    "RecordMetadata",
    "RetriableError",
    "RetryPolicy",
    "RoundRobinPartitioner",
    "StorageError",
    "SystemClock",
    "TimestampType",
    "TopicConfig",
    "TopicDescription",
    "UnknownPartition",
    "UnknownTopic",
    "connect",
    "murmur2",
]
