"""A raw Kafka client for tests: bodies are kafka-python's protocol classes, framed by
:mod:`storage._kafka_framing` (the framing logmarshal's own clients use)."""

from __future__ import annotations

import socket
import time
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.producer.produce import ProduceRequest

from logmarshal._ports import free_port as free_port  # the tests import it from here
from logmarshal._ports import free_ports as free_ports
from storage import NewRecord, encode_batch
from storage._kafka_framing import decode_response, encode_request, recv_frame


class RawClient:
    """One blocking socket; ``call`` sends a request object and decodes the answer."""

    def __init__(self, address: tuple[str, int], timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        """The next answer, without its size (correlation id first)."""
        return recv_frame(self.sock)

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def request_bytes(self, request: Any, correlation_id: int | None = None) -> bytes:
        if correlation_id is None:
            self._correlation += 1
            correlation_id = self._correlation
        return encode_request(request, correlation_id, "test")

    def call(self, request: Any, response_cls: Any) -> Any:
        self.send_raw(self.request_bytes(request))
        return decode_response(
            self.recv_frame(), response_cls, request.API_VERSION, self._correlation
        )


def batch(n: int = 3, start: int = 0, ts: int | None = None) -> bytes:
    now = int(time.time() * 1000) if ts is None else ts
    return encode_batch(
        [
            NewRecord(f"v{i}".encode(), key=f"k{i}".encode(), timestamp=now)
            for i in range(start, start + n)
        ]
    )


def produce_request(
    topic: str, partition: int, records: bytes, acks: int = -1, version: int = 8
) -> Any:
    r = ProduceRequest[version]
    return r(
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            r.TopicProduceData(
                name=topic,
                partition_data=[
                    r.TopicProduceData.PartitionProduceData(index=partition, records=records)
                ],
            )
        ],
    )


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    version: int = 11,
) -> Any:
    r = FetchRequest[version]
    return r(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            r.FetchTopic(
                topic=topic,
                partitions=[
                    r.FetchTopic.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
