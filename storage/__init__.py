"""The durable partitioned log: Kafka RecordBatch v2 segments, indexes, recovery, topics.

Everything public is re-exported here; see the per-module docstrings for the why.
"""

from storage.config import TopicConfig
from storage.datadir import DataDir, PartitionInfo, TopicInfo
from storage.errors import (
    CorruptRecordError,
    DataDirLocked,
    InvalidConfig,
    InvalidRecord,
    InvalidTopicName,
    OffsetOutOfRange,
    RecordTooLarge,
    StorageError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
    UnsupportedCompression,
)
from storage.log import AppendInfo, FetchData, PartitionLog
from storage.records import (
    BATCH_OVERHEAD,
    BatchHeader,
    Compression,
    Header,
    NewRecord,
    Record,
    RecordColumns,
    TimestampType,
    assign_offsets,
    decode_batch,
    decode_columns,
    decode_records,
    encode_batch,
    iter_batches,
    read_header,
    verify_crc,
)

__all__ = [
    "BATCH_OVERHEAD",
    "AppendInfo",
    "BatchHeader",
    "Compression",
    "CorruptRecordError",
    "DataDir",
    "DataDirLocked",
    "FetchData",
    "Header",
    "InvalidConfig",
    "InvalidRecord",
    "InvalidTopicName",
    "NewRecord",
    "OffsetOutOfRange",
    "PartitionInfo",
    "PartitionLog",
    "Record",
    "RecordColumns",
    "RecordTooLarge",
    "StorageError",
    "TimestampType",
    "TopicConfig",
    "TopicExists",
    "TopicInfo",
    "UnknownPartition",
    "UnknownTopic",
    "UnsupportedCompression",
    "assign_offsets",
    "decode_batch",
    "decode_columns",
    "decode_records",
    "encode_batch",
    "iter_batches",
    "read_header",
    "verify_crc",
]
