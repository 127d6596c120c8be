from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rationalizer import (
    ClaimingMessages,
    ClaimingPartition,
    DecodeError,
    Heartbeat,
    ReleaseGroup,
    ReleasingPartition,
    decode,
    encode,
)
from rationalizer.codec import decode_fields

from .strategies import messages

IDS = {"client_id": "c1", "instance_id": "i1", "group_id": "g"}

# The same vectors are printed in PROTOCOL.md ("Golden vectors").
GOLDEN = [
    (
        Heartbeat(**IDS, topic="orders", partition=3, last_offset=41),
        "672f6f72646572732f33",
        "010100000000000000290263310269310167066f726465727303",
    ),
    (
        ClaimingPartition(**IDS, topic="orders", partition=3),
        "672f6f72646572732f33",
        "01020263310269310167066f726465727303",
    ),
    (
        ReleasingPartition(**IDS, topic="orders", partition=3, last_offset=-1),
        "672f6f72646572732f33",
        "0103ffffffffffffffff0263310269310167066f726465727303",
    ),
    (
        ClaimingMessages(**IDS, topic="orders", partition=200, proposed_last_offset=300),
        "672f6f72646572732f323030",
        "0104000000000000012c0263310269310167066f7264657273c801",
    ),
    (
        ReleaseGroup(
            client_id="admin", instance_id="a1", group_id="g", msg_expire_time=1700000000000
        ),
        "67",
        "01050000018bcfe568000561646d696e0261310167",
    ),
    (
        Heartbeat(
            client_id="c1",
            instance_id="i1",
            group_id="grüppe/x",
            topic="orders",
            partition=0,
            last_offset=0,
        ),
        "6772c3bc7070652f782f6f72646572732f30",
        "01010000000000000000026331026931096772c3bc7070652f78066f726465727300",
    ),
]

PROTOCOL = Path(__file__).resolve().parents[2] / "PROTOCOL.md"


@pytest.mark.parametrize(("msg", "key", "value"), GOLDEN)
def test_golden_vectors(msg, key, value):
    assert encode(msg) == (bytes.fromhex(key), bytes.fromhex(value))
    assert decode(bytes.fromhex(key), bytes.fromhex(value)) == msg


def test_golden_vectors_are_documented():
    text = PROTOCOL.read_text(encoding="utf-8")
    for _msg, key, value in GOLDEN:
        assert key in text
        assert value in text


def _hb():
    return encode(Heartbeat(**IDS, topic="orders", partition=3, last_offset=41))


def test_trailing_bytes():
    k, v = _hb()
    with pytest.raises(DecodeError, match="trailing"):
        decode(k, v + b"\x00")


def test_every_truncation_is_rejected():
    for msg, _, _ in GOLDEN:
        k, v = encode(msg)
        for n in range(len(v)):
            with pytest.raises(DecodeError):
                decode(k, v[:n])


def test_unknown_version_and_type():
    k, v = _hb()
    with pytest.raises(DecodeError, match="version"):
        decode(k, b"\x02" + v[1:])
    with pytest.raises(DecodeError, match="version"):
        decode(k, b"\x00" + v[1:])
    for t in (0, 6, 255):
        with pytest.raises(DecodeError, match="type"):
            decode(k, v[:1] + bytes([t]) + v[2:])


def test_key_must_match_value():
    _k, v = _hb()
    for bad in (b"g/orders/4", b"g/orders/03", b"h/orders/3", b"", b"g/orders/3/", b"G/orders/3"):
        with pytest.raises(DecodeError, match="key"):
            decode(bad, v)
    rk, rv = encode(ReleaseGroup(**IDS, msg_expire_time=5))
    with pytest.raises(DecodeError, match="key"):
        decode(b"g/orders/3", rv)
    assert decode(rk, rv).group_id == "g"


def test_non_bytes_inputs():
    k, v = _hb()
    for key, value in ((None, v), (k, None), ("g/orders/3", v), (k, v.hex()), (k, 5)):
        with pytest.raises(DecodeError):
            decode(key, value)
    assert decode(bytearray(k), memoryview(v)) == decode(k, v)


def test_invalid_utf8_and_empty_and_bad_topic():
    ok = encode(ClaimingPartition(**IDS, topic="orders", partition=3))[1]
    key = b"g/orders/3"
    assert ok[2:5] == b"\x02c1"
    with pytest.raises(DecodeError, match="UTF-8"):
        decode(key, ok[:2] + b"\x02\xff\xfe" + ok[5:])
    with pytest.raises(DecodeError, match="empty"):
        decode(b"g/orders/3", ok[:2] + b"\x00" + ok[5:])
    v = b"\x01\x02\x02c1\x02i1\x01g\x03a/b\x00"
    with pytest.raises(DecodeError, match="topic"):
        decode(b"g/a/b/0", v)


def test_overlong_and_out_of_range_varints():
    base = b"\x01\x02\x02c1\x02i1\x01g\x06orders"
    assert decode(b"g/orders/3", base + b"\x03").partition == 3
    with pytest.raises(DecodeError, match="overlong"):
        decode(b"g/orders/3", base + b"\x83\x00")
    with pytest.raises(DecodeError, match="range"):
        decode(b"g/orders/2147483648", base + b"\x80\x80\x80\x80\x08")
    assert decode(b"g/orders/2147483647", base + b"\xff\xff\xff\xff\x07").partition == 2**31 - 1
    with pytest.raises(DecodeError, match="range"):
        decode(b"g/orders/3", b"\x01\x02\x82\x08" + b"x" * 1026)  # id longer than 1024 bytes


def test_offset_below_minus_one():
    k, v = _hb()
    with pytest.raises(DecodeError):
        decode(k, v[:2] + (-2).to_bytes(8, "big", signed=True) + v[10:])
    rk, rv = encode(ReleaseGroup(**IDS, msg_expire_time=5))
    with pytest.raises(DecodeError):
        decode(rk, rv[:2] + (-1).to_bytes(8, "big", signed=True) + rv[10:])


@given(messages)
def test_round_trip_and_fast_form_agrees(msg):
    k, v = encode(msg)
    assert decode(k, v) == msg
    _typ, client, instance, group, topic, partition, number, start = decode_fields(k, v)
    assert (client, instance, group) == (msg.client_id, msg.instance_id, msg.group_id)
    assert getattr(msg, "topic", None) == topic
    assert getattr(msg, "partition", None) == partition
    for name in ("last_offset", "proposed_last_offset", "msg_expire_time"):
        if hasattr(msg, name):
            assert getattr(msg, name) == number
    assert start == (2 if isinstance(msg, ClaimingPartition) else 10)


@settings(max_examples=300)
@given(st.binary(max_size=64), st.binary(max_size=64))
def test_decode_raises_only_decode_error(key, value):
    try:
        msg = decode(key, value)
    except DecodeError:
        return
    assert encode(msg) == (key, value)  # anything accepted is the canonical encoding


@settings(max_examples=300)
@given(messages, st.data())
def test_mutated_records_decode_canonically_or_fail(msg, data):
    k, v = encode(msg)
    v = bytearray(v)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(v) - 1))
        v[i] = data.draw(st.integers(0, 255))
    try:
        out = decode(k, bytes(v))
    except DecodeError:
        return
    assert encode(out) == (k, bytes(v))
