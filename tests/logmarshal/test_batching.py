"""logmarshal._batching: the column-wise encoders (the C one of ``logmarshal._fastproduce``
when built, and the Python reference) write exactly what storage.encode_batch writes, or
decline (None) and leave the records to encode_batch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logmarshal import _batching as batching
from logmarshal._batching import RecordColumns, columns_of, encode_plain, encode_plain_py
from storage import NewRecord, encode_batch
from storage._records import KeptRecord

needs_c = pytest.mark.skipif(
    batching._encode_plain_c is None,
    reason="logmarshal._fastproduce was not built (no C compiler at install)",
)
ENCODERS = [
    pytest.param(encode_plain, id="encode_plain", marks=needs_c),
    pytest.param(encode_plain_py, id="python"),
]

_payload = st.one_of(st.none(), st.binary(max_size=300))


@st.composite
def batches(draw) -> list[NewRecord]:
    n = draw(st.integers(1, 150))
    first = draw(st.integers(5, 2**42))  # (a record older than the first: not below 0)
    keys_null = draw(st.sampled_from(["none", "all", "mixed"]))
    records = []
    for i in range(n):
        key = (
            draw(_payload)
            if keys_null == "mixed"
            else (None if keys_null == "all" else draw(st.binary(max_size=40)))
        )
        value = draw(_payload)
        ts = first if i == 0 else first + draw(st.integers(-5, 20_000))
        headers = draw(st.sampled_from([(), (), (), (("h", b"x"),)]))
        records.append(NewRecord(value, key, headers, timestamp=ts))
    return records


@pytest.mark.parametrize("encode", ENCODERS)
@settings(max_examples=300, deadline=None)
@given(records=batches())
def test_the_fast_encoding_is_encode_batch_or_declines(encode, records) -> None:
    fast = encode(columns_of(records))
    if fast is not None:
        assert fast == encode_batch(records)


@needs_c
@settings(max_examples=300, deadline=None)
@given(records=batches())
def test_the_c_encoder_declines_headers_only(records) -> None:
    fast = encode_plain(columns_of(records))
    if any(r.headers for r in records):
        assert fast is None
    else:
        assert fast == encode_batch(records)


@pytest.mark.parametrize("encode", ENCODERS)
def test_the_usual_batch_takes_the_fast_path(encode) -> None:
    records = [
        NewRecord(b"v" * 100, b"key-%d" % i, timestamp=1_800_000_000_000 + i // 7)
        for i in range(5000)
    ]
    assert encode(columns_of(records)) == encode_batch(records)
    keyless = [NewRecord(b"v", timestamp=5) for _ in range(70)]
    assert encode(columns_of(keyless)) == encode_batch(keyless)


@needs_c
@pytest.mark.parametrize(
    "records",
    [
        [NewRecord(b"v", timestamp=10), NewRecord(b"v", timestamp=9)],  # older than the first
        [NewRecord(b"v", b"k", timestamp=1), NewRecord(b"v", None, timestamp=1)],  # mixed nulls
        [NewRecord(b"v" * 20_000, b"k" * 300, timestamp=1)],  # long fields: 3-byte varints
        # (negative timestamps a NewRecord refuses still reach the encoder as columns)
        [KeptRecord(b"", b"", timestamp=-(2**62)), NewRecord(None, timestamp=2**62 - 1)],
        [NewRecord(b"v", timestamp=2**63 - 1), NewRecord(b"v", timestamp=-1)],  # delta -2**63
    ],
)
def test_the_c_encoder_takes_what_the_python_one_declines(records) -> None:
    assert encode_plain(_columns(records)) == encode_batch(records)


@needs_c
def test_the_c_encoder_declines_a_timestamp_delta_beyond_int64() -> None:
    records = [KeptRecord(b"v", timestamp=-(2**63)), NewRecord(b"v", timestamp=2**62)]
    assert encode_plain(_columns(records)) is None  # encode_batch decides


def _columns(records: list[NewRecord]) -> RecordColumns:
    """The columns of ``records``, of any NewRecord type (``columns_of`` takes NewRecords
    only)."""
    return RecordColumns(
        [r.timestamp for r in records], [r.key for r in records], [r.value for r in records]
    )


@needs_c
def test_the_c_encoder_declines_fields_that_are_not_bytes() -> None:
    columns = RecordColumns([1, 2], [b"k", bytearray(b"k")], [b"v", b"v"])
    assert encode_plain(columns) is None
    assert encode_plain(RecordColumns([1, True], [b"k", b"k"], [b"v", b"v"])) is None


@pytest.mark.parametrize(
    "records",
    [
        [NewRecord(b"v", timestamp=10), NewRecord(b"v", timestamp=9)],  # older than the first
        [NewRecord(b"v", b"k", timestamp=1), NewRecord(b"v", None, timestamp=1)],  # mixed nulls
        [NewRecord(b"v" * 20_000, timestamp=1)],  # long value
        [NewRecord(b"v", headers=(("h", b"x"),), timestamp=1)],
    ],
)
def test_unusual_batches_are_left_to_encode_batch(records) -> None:
    assert encode_plain_py(columns_of(records)) is None


def test_record_columns_is_a_sequence_of_new_records() -> None:
    columns = RecordColumns([1, 2], [b"a", None], [b"x", b"y"], [(), (("h", None),)])
    assert len(columns) == 2
    assert columns[1] == NewRecord(b"y", None, (("h", None),), timestamp=2)
    assert columns[-2] == NewRecord(b"x", b"a", timestamp=1)
    assert list(columns) == [columns[0], columns[1]] == columns[:]
    with pytest.raises(IndexError):
        columns[2]
    assert encode_batch(list(columns)) == encode_batch([columns[0], columns[1]])
    assert columns_of(columns) is columns
    assert columns_of([NewRecord(b"x", timestamp=1), "not a record"]) is None  # type: ignore[list-item]
