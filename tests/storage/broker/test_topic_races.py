"""Producers, readers and DeleteRecords racing a topic deleted and created again, eight
times, against a broker process (an attack on the broker, 2026-12-03, held: this keeps it).
Every request is answered with a code Kafka gives for the moment it lands in (no dropped
connection, no unexpected error), and what a producer had acknowledged before a deletion
was asked for never appears in the topic created after it (a recreated topic starts empty),
while everything acknowledged after the last creation is there."""

from __future__ import annotations

import threading
import time

import pytest
from kafka.protocol.admin.topics import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceResponse

from logmarshal.localbroker import LocalBroker
from storage import NewRecord, decode_records, encode_batch, iter_batches
from storage.broker.errors import ErrorCode

from .helpers import RawClient, fetch_request, produce_request

pytestmark = pytest.mark.long

TOPIC = "race"
CYCLES = 8
OK = ErrorCode.NONE
#: DeleteRecords asks partition 0 of each incarnation to start at this offset
DELETED = 3
GONE = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _create(client: RawClient) -> int:
    r = CreateTopicsRequest[4]
    topic = r.CreatableTopic(
        name=TOPIC, num_partitions=2, replication_factor=1, assignments=[], configs=[]
    )
    answer = client.call(
        r(topics=[topic], timeout_ms=5000, validate_only=False), CreateTopicsResponse
    )
    return answer.topics[0].error_code


def _delete(client: RawClient) -> int:
    answer = client.call(
        DeleteTopicsRequest[3](topic_names=[TOPIC], timeout_ms=5000), DeleteTopicsResponse
    )
    return answer.responses[0].error_code


def _values(records: bytes) -> list[bytes]:
    return [r.value for _, b in iter_batches(records) for r in decode_records(bytes(b))]


def test_produce_fetch_and_delete_records_racing_delete_and_create(tmp_path):
    broker = LocalBroker(tmp_path).start()
    stop = threading.Event()
    acked: dict[bytes, tuple[float, int, int]] = {}  # value: (acknowledged at, partition, offset)
    codes: dict[str, set[int]] = {"produce": set(), "fetch": set(), "delete_records": set()}
    failures: list[BaseException] = []

    def guarded(work):
        def run() -> None:
            try:
                with RawClient(broker.address, timeout=20) as client:
                    work(client)
            except BaseException as exc:  # (handed to the test)
                failures.append(exc)
                stop.set()

        return run

    def produce(tag: bytes):
        def work(client: RawClient) -> None:
            n = 0
            while not stop.is_set():
                value = b"%s-%d" % (tag, n)
                records = encode_batch([NewRecord(value, timestamp=int(time.time() * 1000))])
                answer = client.call(produce_request(TOPIC, n % 2, records), ProduceResponse)
                part = answer.responses[0].partition_responses[0]
                codes["produce"].add(part.error_code)
                if part.error_code == OK:
                    acked[value] = (time.monotonic(), n % 2, part.base_offset)
                n += 1

        return work

    def fetch(client: RawClient) -> None:
        while not stop.is_set():
            for partition in (0, 1):
                answer = client.call(fetch_request(TOPIC, partition, 0), FetchResponse)
                codes["fetch"].add(answer.responses[0].partitions[0].error_code)

    def delete_records(client: RawClient) -> None:
        r = DeleteRecordsRequest[1]
        while not stop.is_set():
            request = r(
                topics=[r.DeleteRecordsTopic(name=TOPIC, partitions=[
                    r.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=DELETED)
                ])],
                timeout_ms=5000,
            )  # fmt: skip
            answer = client.call(request, DeleteRecordsResponse)
            codes["delete_records"].add(answer.topics[0].partitions[0].error_code)
            time.sleep(0.01)

    workers = [
        threading.Thread(target=guarded(w), daemon=True)
        for w in (produce(b"a"), produce(b"b"), fetch, delete_records)
    ]
    try:
        with RawClient(broker.address, timeout=20) as admin:
            assert _create(admin) == OK
            for w in workers:
                w.start()
            last_delete = last_create = 0.0
            for _ in range(CYCLES):
                time.sleep(0.4)
                last_delete = time.monotonic()
                assert _delete(admin) == OK
                time.sleep(0.1)
                assert _create(admin) == OK
                last_create = time.monotonic()
            time.sleep(0.5)
            stop.set()
            for w in workers:
                w.join(30)
            assert not failures, failures
            assert all(not w.is_alive() for w in workers)
            with RawClient(broker.address, timeout=20) as reader:
                stored: list[bytes] = []
                for partition in (0, 1):
                    answer = reader.call(fetch_request(TOPIC, partition, 0), FetchResponse)
                    part = answer.responses[0].partitions[0]
                    if partition == 0 and part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                        # DeleteRecords moved the start, to exactly what it asked for
                        assert part.log_start_offset == DELETED, part
                        answer = reader.call(fetch_request(TOPIC, 0, DELETED), FetchResponse)
                        part = answer.responses[0].partitions[0]
                    assert part.error_code == OK
                    stored += _values(part.records)
        assert broker.alive, broker.output()[-2000:]
    finally:
        stop.set()
        broker.stop(timeout=30)
    assert codes["produce"] <= {OK, GONE}, codes
    assert codes["fetch"] <= {OK, GONE, ErrorCode.OFFSET_OUT_OF_RANGE}, codes
    assert codes["delete_records"] <= {OK, GONE, ErrorCode.OFFSET_OUT_OF_RANGE}, codes
    assert OK in codes["produce"] and GONE in codes["produce"], codes  # (it did race)
    old = [v for v in stored if v in acked and acked[v][0] < last_delete]
    assert not old, f"{len(old)} records of a deleted topic in its successor: {old[:5]}"
    after = {
        v
        for v, (t, partition, offset) in acked.items()
        if t > last_create and not (partition == 0 and offset < DELETED)
    }
    missing = after - set(stored)
    assert not missing, f"{len(missing)} acknowledged records lost: {sorted(missing)[:5]}"
    assert after, "nothing was acknowledged after the last creation"
