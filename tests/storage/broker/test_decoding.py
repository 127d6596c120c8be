"""Malformed request bodies cost what their size does, not its square (storage.broker.decoding;
a helper's attack of 2026-12-05 held the broker's event loop 10-15 s with one request each)."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from storage.broker import decoding
from storage.broker.decoding import MAX_HIGH_BIT_RUN, decode_body

from .helpers import RawClient, batch, produce_request


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return bytes(out + bytes([b]))
        out.append(b | 0x80)


def _list_offsets_v6(partitions: bytes, count: int) -> bytes:
    """ListOffsets v6 (flexible) body: replica -1, isolation 0, one topic 't' with
    ``count`` partitions (their bytes as given)."""
    return (
        struct.pack(">ib", -1, 0)
        + _uvarint(2)
        + _uvarint(2)
        + b"t"
        + _uvarint(count + 1)
        + partitions
        + b"\x00"  # the topic's tagged fields
        + b"\x00"  # the request's
    )


def test_a_varint_longer_than_any_is_refused_before_decoding() -> None:
    """1 MB of continuation bytes was read as one growing integer: 15 s of the loop."""
    body = struct.pack(">ib", -1, 0) + b"\xff" * (MAX_HIGH_BIT_RUN + 1) + b"\x01"
    with pytest.raises(ValueError, match="high bit set in a row, from byte 5"):
        decode_body(ListOffsetsRequest, memoryview(body), 6, produce=False)
    # a run as long as the bound is left to the decoder (which refuses it for what it is)
    body = struct.pack(">ib", -1, 0) + b"\xff" * MAX_HIGH_BIT_RUN + b"\x01"
    with pytest.raises(Exception) as caught:
        decode_body(ListOffsetsRequest, memoryview(body), 6, produce=False)
    assert "high bit" not in str(caught.value)


def test_tagged_fields_are_read_in_place(monkeypatch) -> None:
    """Each struct with tagged fields copied the rest of the frame to read them: 10 s for
    4 MB of partitions with an empty tagged field each. They are read from the frame."""
    reads: list[int] = []
    real = decoding._FrameReader.read

    def spy(self, n: int = -1) -> bytes:
        reads.append(n)
        return real(self, n)

    monkeypatch.setattr(decoding._FrameReader, "read", spy)
    count = 2000
    part = b"".join(
        struct.pack(">iiq", p, -1, -2) + b"\x01\x05\x00"  # an unknown tag 5, empty
        for p in range(count)
    )
    body = _list_offsets_v6(part, count)
    request = decode_body(ListOffsetsRequest, memoryview(body), 6, produce=False)
    parts = request.topics[0].partitions
    assert [(p.partition_index, p.timestamp) for p in parts] == [(p, -2) for p in range(count)]
    assert reads and len(reads) >= count  # (each struct's tags, read through the frame)


def test_fields_that_run_past_the_end_are_malformed() -> None:
    """A Produce whose records claimed 1,000,000 bytes and held one 87-byte batch was
    stored and answered NONE."""
    records = batch(1)
    r = ProduceRequest[3]
    body = r(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            r.TopicProduceData(
                name="t",
                partition_data=[r.TopicProduceData.PartitionProduceData(index=0, records=records)],
            )
        ],
    ).encode()
    whole = decode_body(ProduceRequest, memoryview(body), 3, produce=True)
    assert whole.topic_data[0].partition_data[0].records == records
    at = body.rindex(struct.pack(">i", len(records)) + records)
    lying = body[:at] + struct.pack(">i", 1_000_000) + records
    with pytest.raises(ValueError, match=f"run {1_000_000 - len(records)} bytes past the end"):
        decode_body(ProduceRequest, memoryview(lying), 3, produce=True)


def test_the_broker_closes_such_a_request_and_serves_on(broker) -> None:
    """Over the wire: the lying Produce and the long varint close their connections (as
    any malformed request does); nothing is stored; another client is served."""
    records = batch(1)
    good = produce_request("t", 0, records)
    with RawClient(broker.address) as client:
        frame = client.request_bytes(good)
        at = frame.rindex(struct.pack(">i", len(records)) + records)
        lying = frame[:at] + struct.pack(">i", 1_000_000) + records
        client.send_raw(struct.pack(">i", len(lying) - 4) + lying[4:])
        assert client.is_closed_by_peer()
    header = struct.pack(">hhih", 2, 6, 7, 1) + b"x" + b"\x00"  # ListOffsets v6, header v2
    body = struct.pack(">ib", -1, 0) + b"\xff" * 100_000 + b"\x01"
    with RawClient(broker.address) as client:
        client.send_raw(struct.pack(">i", len(header + body)) + header + body)
        assert client.is_closed_by_peer()
    with RawClient(broker.address) as client:
        answer = client.call(good, ProduceResponse)
        assert answer.responses[0].partition_responses[0].base_offset == 0  # the lie: not stored
        offsets = ListOffsetsRequest[1]
        asked = offsets(
            replica_id=-1,
            topics=[
                offsets.ListOffsetsTopic(
                    name="t",
                    partitions=[offsets.ListOffsetsTopic.ListOffsetsPartition(
                        partition_index=0, timestamp=-1)],
                )
            ],
        )  # fmt: skip
        latest = client.call(asked, ListOffsetsResponse)
        assert latest.topics[0].partitions[0].offset == 1
