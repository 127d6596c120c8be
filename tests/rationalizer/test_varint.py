"""The one varint of the rationalizer's formats (record values, snapshots, snapshot records)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rationalizer._varint import (
    append_svarint,
    append_uvarint,
    read_svarint,
    read_uvarint,
    uvarint,
)

U64 = 2**64 - 1


class Bad(ValueError):
    pass


@given(st.integers(0, U64))
def test_unsigned_round_trip(n: int) -> None:
    out = bytearray(b"x")
    append_uvarint(out, n)
    assert bytes(out[1:]) == uvarint(n)
    assert read_uvarint(bytes(out), 1, U64, "n", Bad) == (n, len(out))


@given(st.integers(-(2**63), 2**63 - 1))
def test_zigzag_round_trip(n: int) -> None:
    out = bytearray()
    append_svarint(out, n)
    assert read_svarint(bytes(out), 0, U64, "n", Bad) == (n, len(out))


def test_zigzag_order():
    assert [uvarint(z) for z in range(4)] == [bytes([0]), bytes([1]), bytes([2]), bytes([3])]
    for n, z in ((0, 0), (-1, 1), (1, 2), (-2, 3)):
        out = bytearray()
        append_svarint(out, n)
        assert bytes(out) == uvarint(z)


@pytest.mark.parametrize(
    ("data", "limit", "message"),
    [
        (b"", 10, "truncated n"),
        (b"\x80", 10, "truncated n"),
        (b"\x0b", 10, "n out of range"),
        (b"\x81\x00", 10, "overlong varint in n"),
        (b"\x80\x00", 10, "overlong varint in n"),
    ],
)
def test_strict_reader_raises_the_callers_error(data: bytes, limit: int, message: str) -> None:
    with pytest.raises(Bad, match=f"^{message}$"):
        read_uvarint(data, 0, limit, "n", Bad)
