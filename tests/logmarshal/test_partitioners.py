from __future__ import annotations

from collections import Counter

import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from logmarshal.partitioners import (
    Mmh3Partitioner,
    Murmur2Partitioner,
    RoundRobinPartitioner,
    murmur2,
    murmur2_py,
    resolve_partitioner,
)

# From Apache Kafka's UtilsTest.testMurmur2 (signed Java ints).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "signed"), JAVA_VECTORS.items())
def test_murmur2_matches_the_java_client(data: bytes, signed: int) -> None:
    assert murmur2(data) == signed & 0xFFFFFFFF


@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    assert murmur2(data) == kafka_python_murmur2(data)


@given(st.binary(max_size=64))
def test_the_python_murmur2_is_the_same_function(data: bytes) -> None:
    # murmur2 is logmarshal._fastproduce's when it was built, the Python one otherwise
    assert murmur2_py(data) == kafka_python_murmur2(data) == murmur2(bytearray(data))


def test_keyed_records_land_where_the_java_client_puts_them() -> None:
    partitioner = Murmur2Partitioner()
    # Java: Utils.toPositive(Utils.murmur2(key)) % numPartitions
    assert partitioner(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7
    assert all(partitioner(b"abc", 12) == partitioner(b"abc", 12) for _ in range(5))


def test_keyless_records_are_spread_round_robin() -> None:
    partitioner = Murmur2Partitioner()
    counts = Counter(partitioner(None, 4) for _ in range(400))
    assert counts == {0: 100, 1: 100, 2: 100, 3: 100}


def test_mmh3_partitioner_uses_unsigned_murmur3() -> None:
    assert Mmh3Partitioner()(b"key", 10) == mmh3.hash(b"key", 0, signed=False) % 10


def test_round_robin_ignores_keys() -> None:
    partitioner = RoundRobinPartitioner()
    assert [partitioner(b"same", 3) for _ in range(6)] == [0, 1, 2, 0, 1, 2]


def test_resolve_by_name_and_callable() -> None:
    assert isinstance(resolve_partitioner("mmh3"), Mmh3Partitioner)

    def custom(key: bytes | None, n: int) -> int:
        return n - 1

    assert resolve_partitioner(custom) is custom
    with pytest.raises(ValueError, match="unknown partitioner 'nope'"):
        resolve_partitioner("nope")
    with pytest.raises(TypeError):
        resolve_partitioner(42)  # type: ignore[arg-type]


def test_zero_partitions_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        Murmur2Partitioner()(b"k", 0)
