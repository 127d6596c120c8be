"""Idempotent producers over the wire: retries stored once, gaps refused, state survives a crash."""

from __future__ import annotations

import time
from pathlib import Path

from kafka.protocol.producer.produce import ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from logmarshal.localbroker import LocalBroker
from storage import DataDir, NewRecord, decode_records, encode_batch
from storage.broker import BrokerConfig, BrokerThread
from storage.broker.errors import ErrorCode

from .helpers import RawClient, produce_request


def init_producer_id(client: RawClient) -> tuple[int, int]:
    r = client.call(
        InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60000),
        InitProducerIdResponse,
    )
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


def idem_batch(pid: int, epoch: int, seq: int, n: int = 3, tag: str = "") -> bytes:
    return encode_batch(
        [
            NewRecord(f"{tag}{seq + i}".encode(), timestamp=int(time.time() * 1000))
            for i in range(n)
        ],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def produce(client: RawClient, topic: str, records: bytes) -> tuple[int, int, int]:
    r = client.call(produce_request(topic, 0, records), ProduceResponse)
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset, p.log_append_time_ms


def stored_values(data: Path, topic: str) -> list[bytes]:
    with DataDir(data) as d:
        plog = d.partition(topic, 0)
        return [r.value for r in decode_records(plog.read(0, 1 << 20).data)]


def test_same_batch_twice_is_stored_once_with_the_same_offsets(broker):
    with RawClient(broker.address) as c:
        pid, epoch = init_producer_id(c)
        first = idem_batch(pid, epoch, 0)
        assert produce(c, "t", first)[:2] == (0, 0)
        second = idem_batch(pid, epoch, 3)
        assert produce(c, "t", second)[:2] == (0, 3)
        # retries of both (an older one too) answer with the original offsets
        assert produce(c, "t", second)[:2] == (0, 3)
        assert produce(c, "t", first)[:2] == (0, 0)
        assert produce(c, "t", idem_batch(pid, epoch, 6))[:2] == (0, 6)
    broker.stop()
    assert stored_values(Path(broker.config.data_dir), "t") == [str(i).encode() for i in range(9)]


def test_duplicate_on_log_append_time_topic_returns_original_time(broker):
    with RawClient(broker.address) as c:
        pid, epoch = init_producer_id(c)
        b = idem_batch(pid, epoch, 0)
        err, base, t1 = produce(c, "lat", b)
        assert (err, base) == (0, 0) and t1 > 0
        assert produce(c, "lat", b) == (0, 0, t1)


def test_gap_old_epoch_and_bad_retry_are_refused_and_not_stored(broker):
    with RawClient(broker.address) as c:
        pid, _ = init_producer_id(c)
        assert produce(c, "t", idem_batch(pid, 1, 0))[0] == 0
        assert produce(c, "t", idem_batch(pid, 1, 4))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(c, "t", idem_batch(pid, 0, 3))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert produce(c, "t", idem_batch(pid, 2, 1))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # a damaged copy of a stored batch is not answered as a duplicate
        damaged = bytearray(idem_batch(pid, 1, 0))
        damaged[-1] ^= 0xFF
        assert produce(c, "t", bytes(damaged))[0] == ErrorCode.CORRUPT_MESSAGE
        assert produce(c, "t", idem_batch(pid, 1, 3))[:2] == (0, 3)
        # a producer that is not idempotent is not checked
        plain = encode_batch([NewRecord(b"p", timestamp=1)])
        assert produce(c, "t", plain)[:2] == (0, 6)
        assert produce(c, "t", plain)[:2] == (0, 7)


def test_producer_ids_differ_per_call_and_between_brokers(tmp_path):
    seen = set()
    for run in range(2):
        with (
            BrokerThread(BrokerConfig(data_dir=tmp_path / "d", port=0)) as b,
            RawClient(b.address) as c,
        ):
            ids = [init_producer_id(c)[0] for _ in range(3)]
            assert len(set(ids)) == 3 and not seen & set(ids)
            seen |= set(ids)
            if run == 1:
                assert min(ids) > max(seen - set(ids))  # a restart continues above


def _start(broker: LocalBroker) -> tuple[str, int]:
    broker.start()
    line = broker.first_line()
    assert line.startswith("listening on 127.0.0.1:"), line
    return broker.address


def test_retries_still_dedupe_after_sigkill_and_restart(tmp_path):
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("s", 1)
    broker = LocalBroker(tmp_path, data_dir=data)
    address = _start(broker)
    try:
        with RawClient(address) as c:
            pid, epoch = init_producer_id(c)
            for seq in range(0, 30, 3):
                assert produce(c, "s", idem_batch(pid, epoch, seq))[:2] == (0, seq)
        broker.kill()
        address = _start(broker)  # on the same port and data
        with RawClient(address) as c:
            # the producer did not hear back and retries its in-flight batches
            for seq in (21, 24, 27):
                assert produce(c, "s", idem_batch(pid, epoch, seq))[:2] == (0, seq)
            assert produce(c, "s", idem_batch(pid, epoch, 33))[0] == (
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            )
            assert produce(c, "s", idem_batch(pid, epoch, 30))[:2] == (0, 30)
            new_pid, _ = init_producer_id(c)
            assert new_pid != pid and new_pid > pid
    finally:
        broker.stop(timeout=20)
    assert stored_values(data, "s") == [str(i).encode() for i in range(33)]


def test_idle_producer_state_is_forgotten_after_the_expiration(tmp_path):
    from storage.broker.idempotence import Idempotence

    now = [1_000_000]
    idem = Idempotence(clock=lambda: now[0], expiration_ms=10_000)
    with DataDir(tmp_path / "d") as d:
        d.create_topic("x", 1)
        plog = d.partition("x", 0)
        assert idem.append(plog, idem_batch(7, 0, 0), flush=False)[0] is not None
        now[0] += 70_000
        assert idem.append(plog, idem_batch(8, 0, 0), flush=False)[0] is not None
        assert idem.states(plog).epoch_of(7) is None  # idle 70 s > 10 s: forgotten
        assert idem.states(plog).epoch_of(8) == 0
