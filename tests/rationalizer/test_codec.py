import hashlib
import hmac
from pathlib import Path

import attrs
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
    sign,
)
from rationalizer._auth import verify
from rationalizer._codec import decode_fields

from .strategies import messages

IDS = {"client_id": "c1", "instance_id": "i1", "group_id": "g"}
ADMIN = {"client_id": "admin", "instance_id": "a1", "group_id": "g"}
KEY = bytes(range(32))  # the key of the tagged vectors

# The same vectors are printed in PROTOCOL.md ("Golden vectors").
GOLDEN = [
    (
        Heartbeat(**IDS, topic="orders", partition=3, last_offset=41, heartbeat_interval_ms=3000),
        "672f6f72646572732f33",
        "0101000000000000002900000bb8000263310269310167066f726465727303",
    ),
    (
        ClaimingPartition(**IDS, topic="orders", partition=3, heartbeat_interval_ms=3000),
        "672f6f72646572732f33",
        "010200000bb80263310269310167066f726465727303",
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
        ReleaseGroup(**ADMIN, msg_expire_time=1700000000000),
        "67",
        "01050000018bcfe56800000561646d696e0261310167",
    ),
    (
        Heartbeat(
            client_id="c1",
            instance_id="i1",
            group_id="grüppe/x",
            topic="orders",
            partition=0,
            last_offset=0,
            heartbeat_interval_ms=1,
        ),
        "6772c3bc7070652f782f6f72646572732f30",
        "010100000000000000000000000100026331026931096772c3bc7070652f78066f726465727300",
    ),
    (
        sign(ReleaseGroup(**ADMIN, msg_expire_time=1700000000000), KEY),
        "67",
        "01050000018bcfe56800"
        "20676ddac7d2ec4fbd2048bd44366b63a31d38d104ab635b14d0dc359d76dd5fed"
        "0561646d696e0261310167",
    ),
    (
        sign(
            Heartbeat(
                **ADMIN,
                topic="orders",
                partition=3,
                last_offset=99,
                heartbeat_interval_ms=3_600_000,
            ),
            KEY,
        ),
        "672f6f72646572732f33",
        "010100000000000000630036ee80"
        "2090eae70fc64952a782139a9c17016b3b64268a41a9330ca416b65785f9f9ad56"
        "0561646d696e0261310167066f726465727303",
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


def test_tagged_vectors_are_hmac_sha256_of_the_untagged_encoding():
    """Independent of rationalizer._auth: the tag is HMAC-SHA256(key, value with an empty tag),
    and the empty-tag encoding is the tagged one with its 33-byte tag field (length 32 + tag,
    at byte 14 of a Heartbeat, 10 of a ReleaseGroup) replaced by one 0x00 byte."""
    for msg, _key, value in GOLDEN:
        if getattr(msg, "auth_tag", None) is None:
            continue
        raw = bytes.fromhex(value)
        pos = 14 if isinstance(msg, Heartbeat) else 10
        unsigned = raw[:pos] + b"\x00" + raw[pos + 33 :]
        assert raw[pos] == 32
        tag = raw[pos + 1 : pos + 33]
        assert tag == hmac.new(KEY, unsigned, hashlib.sha256).digest() == msg.auth_tag
        assert encode(attrs.evolve(msg, auth_tag=None))[1] == unsigned
        assert verify(msg, KEY)


def _hb():
    return encode(
        Heartbeat(**IDS, topic="orders", partition=3, last_offset=41, heartbeat_interval_ms=3000)
    )


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
    ok = encode(ClaimingPartition(**IDS, topic="orders", partition=3, heartbeat_interval_ms=1))[1]
    key = b"g/orders/3"
    assert ok[6:9] == b"\x02c1"
    with pytest.raises(DecodeError, match="UTF-8"):
        decode(key, ok[:6] + b"\x02\xff\xfe" + ok[9:])
    with pytest.raises(DecodeError, match="empty"):
        decode(b"g/orders/3", ok[:6] + b"\x00" + ok[9:])
    v = b"\x01\x02\x00\x00\x00\x01\x02c1\x02i1\x01g\x03a/b\x00"
    with pytest.raises(DecodeError, match="topic"):
        decode(b"g/a/b/0", v)


def test_overlong_and_out_of_range_varints():
    base = b"\x01\x02\x00\x00\x00\x01\x02c1\x02i1\x01g\x06orders"
    assert decode(b"g/orders/3", base + b"\x03").partition == 3
    with pytest.raises(DecodeError, match="overlong"):
        decode(b"g/orders/3", base + b"\x83\x00")
    with pytest.raises(DecodeError, match="range"):
        decode(b"g/orders/2147483648", base + b"\x80\x80\x80\x80\x08")
    assert decode(b"g/orders/2147483647", base + b"\xff\xff\xff\xff\x07").partition == 2**31 - 1
    with pytest.raises(DecodeError, match="range"):  # id longer than 1024 bytes
        decode(b"g/orders/3", b"\x01\x02\x00\x00\x00\x01\x82\x08" + b"x" * 1026)


def test_offset_below_minus_one():
    k, v = _hb()
    with pytest.raises(DecodeError):
        decode(k, v[:2] + (-2).to_bytes(8, "big", signed=True) + v[10:])
    rk, rv = encode(ReleaseGroup(**IDS, msg_expire_time=5))
    with pytest.raises(DecodeError):
        decode(rk, rv[:2] + (-1).to_bytes(8, "big", signed=True) + rv[10:])


def test_heartbeat_interval_field():
    k = b"g/orders/3"
    tail = b"\x02c1\x02i1\x01g\x06orders\x03"
    cp = b"\x01\x02"
    hb = b"\x01\x01" + bytes(8)  # last_offset 0
    for head, more in ((cp, b""), (hb, b"\x00")):
        assert decode(k, head + (1).to_bytes(4, "big") + more + tail).heartbeat_interval_ms == 1
        top = (3_600_000).to_bytes(4, "big")
        assert decode(k, head + top + more + tail).heartbeat_interval_ms == 3_600_000
        for bad in (0, 3_600_001, 2**32 - 1):  # 0 ms, one hour + 1 ms, ...
            with pytest.raises(DecodeError, match="heartbeat_interval_ms"):
                decode(k, head + bad.to_bytes(4, "big") + more + tail)
        with pytest.raises(DecodeError, match="truncated heartbeat_interval_ms"):
            decode(k, head + b"\x00\x00\x01")


def test_auth_tag_field_is_strict():
    k, v = _hb()  # untagged: zero length byte at 14
    assert v[14] == 0
    tagged = v[:14] + b"\x20" + bytes(32) + v[15:]
    assert decode(k, tagged).auth_tag == bytes(32)
    assert decode(k, tagged) == attrs.evolve(decode(k, v), auth_tag=bytes(32))
    for n in (1, 31, 33, 0x80, 0xFF):
        with pytest.raises(DecodeError):
            decode(k, v[:14] + bytes([n]) + bytes(n) + v[15:])
    with pytest.raises(DecodeError, match="truncated"):
        decode(k, v[:14])  # the length byte is mandatory
    with pytest.raises(DecodeError, match="truncated auth_tag"):
        decode(k, tagged[:40])
    rk, rv = encode(ReleaseGroup(**IDS, msg_expire_time=5))
    assert rv[10] == 0
    with pytest.raises(DecodeError):
        decode(rk, rv[:10] + b"\x01\x00" + rv[11:])


@given(messages)
def test_round_trip_and_fast_form_agrees(msg):
    k, v = encode(msg)
    assert decode(k, v) == msg
    typ, client, instance, group, topic, partition, number, start, hb, tag = decode_fields(k, v)
    assert getattr(msg, "heartbeat_interval_ms", None) == hb
    assert getattr(msg, "auth_tag", None) == tag
    if tag is not None:
        pos = 14 if isinstance(msg, Heartbeat) else 10
        assert v[pos] == 32 and v[pos + 1 : pos + 33] == tag
    assert (client, instance, group) == (msg.client_id, msg.instance_id, msg.group_id)
    assert getattr(msg, "topic", None) == topic
    assert getattr(msg, "partition", None) == partition
    for name in ("last_offset", "proposed_last_offset", "msg_expire_time"):
        if hasattr(msg, name):
            assert getattr(msg, name) == number
    header = {Heartbeat: 15, ClaimingPartition: 6, ReleaseGroup: 11}.get(type(msg), 10)
    assert start == header + (32 if tag is not None else 0)
    if not isinstance(msg, ReleaseGroup):  # the identity part is the same for every type
        same = ReleasingPartition(
            client_id=client, instance_id=instance, group_id=group, topic=topic,
            partition=partition, last_offset=0,
        )  # fmt: skip
        assert v[start:] == encode(same)[1][10:]
    assert typ == v[1]


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
