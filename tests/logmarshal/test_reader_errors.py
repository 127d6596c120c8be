"""A batch from librdkafka that carries an error reaches the network readers' error paths.

Found while attacking the exact log start (2026-12-04): a fetch below the log start got
librdkafka's OFFSET_OUT_OF_RANGE as a message in the batch, and the readers checked the
batch with ``errors.count(None)``. That compares each KafkaError with None, which raises
inside confluent-kafka's comparison; CPython reports it as a SystemError, so the read ended
with that instead of the OffsetOutOfRange it carried. No broker is needed: the Messages are
confluent-kafka's own, built by its constructor."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from logmarshal.errors import OffsetOutOfRange
from logmarshal.network.partition_reader import _PartitionReader
from logmarshal.network.readers import _Reader

TOPIC = "t"
CONF = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "log_level": 0}


def _batch() -> list[Any]:
    ok = Message(topic=TOPIC, partition=0, offset=7, value=b"v")
    failed = Message(
        topic=TOPIC, partition=0, offset=8, error=KafkaError(KafkaError.OFFSET_OUT_OF_RANGE)
    )
    return [ok, failed]


class _Watermarks:
    """Stands in for the librdkafka consumer's watermark lookup (no broker here)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def get_watermark_offsets(self, *_args: Any, **_kw: Any) -> tuple[int, int]:
        return 9, 20

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_the_partition_reader_raises_the_out_of_range_a_batch_carries() -> None:
    reader = _PartitionReader(CONF, TOPIC, 0)
    try:
        reader._seek(7)
        reader._consumer = _Watermarks(reader._consumer)
        with pytest.raises(OffsetOutOfRange) as exc:
            reader._take(_batch())
        assert (exc.value.log_start_offset, exc.value.log_end_offset) == (9, 20)
    finally:
        reader.close()


def test_the_member_reader_keeps_the_records_and_the_error_of_a_batch() -> None:
    reader = _Reader(CONF, 5.0, 1 << 20, lambda keys: {}, log_ends=lambda keys, timeout: {})
    try:
        reader.want(TOPIC, 0, 7)
        reader._consumer = _Watermarks(reader._consumer)
        reader._take(_batch())
        assert [m.offset for m in reader._ahead[(TOPIC, 0)]] == [7]
        error = reader._errors[(TOPIC, 0)]
        assert isinstance(error, OffsetOutOfRange)
        assert (error.log_start_offset, error.log_end_offset) == (9, 20)
    finally:
        reader._consumer = reader._consumer._inner
        reader.close()
