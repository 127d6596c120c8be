"""logmarshal.batching: the column-wise encoder writes exactly what storage.encode_batch
writes, or declines (None) and leaves the record to encode_batch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logmarshal.batching import RecordColumns, columns_of, encode_plain
from storage import NewRecord, encode_batch

_payload = st.one_of(st.none(), st.binary(max_size=300))


@st.composite
def batches(draw) -> list[NewRecord]:
    n = draw(st.integers(1, 150))
    first = draw(st.integers(0, 2**42))
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


@settings(max_examples=300, deadline=None)
@given(batches())
def test_the_fast_encoding_is_encode_batch_or_declines(records) -> None:
    fast = encode_plain(columns_of(records))
    if fast is not None:
        assert fast == encode_batch(records)


def test_the_usual_batch_takes_the_fast_path() -> None:
    records = [
        NewRecord(b"v" * 100, b"key-%d" % i, timestamp=1_800_000_000_000 + i // 7)
        for i in range(5000)
    ]
    assert encode_plain(columns_of(records)) == encode_batch(records)
    keyless = [NewRecord(b"v", timestamp=5) for _ in range(70)]
    assert encode_plain(columns_of(keyless)) == encode_batch(keyless)


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
    assert encode_plain(columns_of(records)) is None


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
