"""A seeded fuzzer for the broker: mutated frames of every served API, over real sockets.

The seed frames are the requests kcat, confluent-kafka and kafka-python were recorded sending
(``captured_frames.bin``, made by ``python3 -m tests.storage.broker.capture``), plus what
kafka-python's protocol classes encode for each served API at its lowest and highest version
(a real record batch in Produce). Each iteration
mutates one (byte flips, an int32 set to -1 / 0x7fffffff / a random value, truncation,
insertion, duplication, a header byte changed), sends it, and reads an answer for a moment.
Afterwards the broker must still answer a produce and a fetch, and its log must hold no
"unexpected error": every bad frame is either answered with an error code or refused as
malformed (the connection closed, as Kafka does).

In the suite: ``tests/storage/broker/test_fuzz.py`` (bounded). Longer, from the command line::

    PYTHONPATH=. python3 -m tests.storage.broker.fuzz --iterations 20000 --seed 7
"""

from __future__ import annotations

import argparse
import logging
import random
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kafka.protocol.admin.configs import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.admin.groups import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
)
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest

from storage import Compression, DataDir, NewRecord, encode_batch
from storage.broker import BrokerConfig, BrokerThread
from storage.broker.wire import SUPPORTED
from tests.storage.broker.helpers import fetch_request, produce_request

__all__ = ["FuzzReport", "captured_frames", "run_fuzz", "seed_frames"]


def _encode(request: Any, correlation_id: int = 1) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="fuzz")
    return bytes(request.encode(header=True, framed=True))


def _requests(version_of: dict[int, int]) -> list[Any]:
    """One valid request per API at the given versions (api key -> version)."""
    now = int(time.time() * 1000)
    records = encode_batch(
        [NewRecord(b"v%d" % i, key=b"k", headers=[("h", b"x")], timestamp=now) for i in range(3)],
        compression=Compression.GZIP,
    )
    out = []
    v = version_of
    out.append(produce_request("t", 0, records, version=v[0]))
    out.append(fetch_request("t", 0, 0, version=v[1]))
    r = ListOffsetsRequest[v[2]]
    out.append(
        r(
            topics=[
                r.ListOffsetsTopic(
                    name="t",
                    partitions=[
                        r.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-2)
                    ],
                )
            ]
        )
    )
    r = MetadataRequest[v[3]]
    out.append(r(topics=[r.MetadataRequestTopic(name="t")]))
    out.append(ApiVersionsRequest[v[18]]())
    r = CreateTopicsRequest[v[19]]
    out.append(
        r(
            topics=[
                r.CreatableTopic(
                    name="fz", num_partitions=2, replication_factor=1, assignments=[], configs=[]
                )
            ],
            timeout_ms=1000,
        )
    )
    r = DeleteTopicsRequest[v[20]]
    out.append(r(topic_names=["fz"], timeout_ms=1000))
    out.append(InitProducerIdRequest[v[22]](transactional_id=None, transaction_timeout_ms=1000))
    r = DescribeConfigsRequest[v[32]]
    out.append(
        r(
            resources=[
                r.DescribeConfigsResource(
                    resource_type=2, resource_name="t", configuration_keys=None
                )
            ]
        )
    )
    r = AlterConfigsRequest[v[33]]
    res = r.AlterConfigsResource
    out.append(
        r(
            resources=[
                res(
                    resource_type=2,
                    resource_name="t",
                    configs=[res.AlterableConfig(name="retention.ms", value="86400000")],
                )
            ],
            validate_only=False,
        )
    )
    r = CreatePartitionsRequest[v[37]]
    out.append(
        r(
            topics=[r.CreatePartitionsTopic(name="t", count=3, assignments=None)],
            timeout_ms=1000,
            validate_only=True,
        )
    )
    r = IncrementalAlterConfigsRequest[v[44]]
    res = r.AlterConfigsResource
    out.append(
        r(
            resources=[
                res(
                    resource_type=2,
                    resource_name="t",
                    configs=[
                        res.AlterableConfig(name="segment.ms", config_operation=0, value="600000")
                    ],
                )
            ],
            validate_only=False,
        )
    )
    r = DeleteRecordsRequest[v[21]]
    t = r.DeleteRecordsTopic
    out.append(
        r(
            topics=[
                t(name="t", partitions=[t.DeleteRecordsPartition(partition_index=0, offset=1)])
            ],
            timeout_ms=1000,
        )
    )
    out.extend(_group_requests(v))
    return out


def _group_requests(v: dict[int, int]) -> list[Any]:
    """The group APIs: the read-only views and the classic-consumption calls refused."""
    out = []
    r = OffsetCommitRequest[v[8]]
    t = r.OffsetCommitRequestTopic
    out.append(
        r(
            group_id="g",
            member_id="m",
            topics=[
                t(
                    name="t",
                    partitions=[
                        t.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=5, committed_metadata=None
                        )
                    ],
                )
            ],
        )
    )
    r = OffsetFetchRequest[v[9]]
    out.append(r(group_id="g", topics=[r.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]))
    out.append(FindCoordinatorRequest[v[10]](key="g"))
    r = JoinGroupRequest[v[11]]
    out.append(
        r(
            group_id="g",
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            member_id="",
            protocol_type="consumer",
            protocols=[r.JoinGroupRequestProtocol(name="range", metadata=b"x")],
        )
    )
    out.append(HeartbeatRequest[v[12]](group_id="g", generation_id=1, member_id="m"))
    r = LeaveGroupRequest[v[13]]
    if v[13] >= 3:
        out.append(r(group_id="g", members=[r.MemberIdentity(member_id="m")]))
    else:
        out.append(r(group_id="g", member_id="m"))
    r = SyncGroupRequest[v[14]]
    out.append(
        r(
            group_id="g",
            generation_id=1,
            member_id="m",
            assignments=[r.SyncGroupRequestAssignment(member_id="m", assignment=b"")],
        )
    )
    out.append(DescribeGroupsRequest[v[15]](groups=["g"]))
    out.append(ListGroupsRequest[v[16]]())
    return out


CAPTURED = Path(__file__).with_name("captured_frames.bin")


def captured_frames() -> list[bytes]:
    """Frames kcat, confluent-kafka and kafka-python sent (recorded by tests.storage.broker.capture)."""
    data = CAPTURED.read_bytes() if CAPTURED.exists() else b""
    frames, pos = [], 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        frames.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return frames


def seed_frames() -> list[bytes]:
    """Valid frames (size prefix included): every served API at its lowest and highest version
    as kafka-python encodes it, plus the frames real clients were recorded sending."""
    frames = []
    for pick in (min, max):
        versions = {
            key: pick(spec.min_version, spec.max_version) for key, spec in SUPPORTED.items()
        }
        frames.extend(_encode(req) for req in _requests(versions))
    return frames + captured_frames()


def mutate(frame: bytes, rng: random.Random) -> bytes:
    """One mutation of a framed request; the size prefix is recomputed unless mutated itself."""
    body = bytearray(frame[4:])
    kind = rng.randrange(8)
    n = len(body)
    if kind == 0:  # flip a few bytes anywhere after the api key / version
        for _ in range(rng.randint(1, 4)):
            body[rng.randrange(4, n)] = rng.randrange(256)
    elif kind in (1, 2, 3):  # an int32 (array or string length, count, ...) set to an edge value
        pos = rng.randrange(4, max(5, n - 4))
        value = (-1, 0x7FFFFFFF, rng.randrange(-(1 << 31), 1 << 31))[kind - 1]
        body[pos : pos + 4] = struct.pack(">i", value)
    elif kind == 4:  # an int16 set to -1 (null string) or large
        pos = rng.randrange(4, max(5, n - 2))
        body[pos : pos + 2] = struct.pack(">h", rng.choice((-1, 0x7FFF, -2)))
    elif kind == 5:  # truncated
        del body[rng.randrange(8, n) :]
    elif kind == 6:  # bytes inserted or a chunk duplicated
        pos = rng.randrange(4, n)
        chunk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        if rng.random() < 0.5:
            chunk = bytes(body[pos : pos + rng.randint(1, 64)])
        body[pos:pos] = chunk
    else:  # the header: api version (or key) changed
        pos = rng.randrange(0, 4)
        body[pos] = rng.randrange(256)
    if rng.random() < 0.05:  # rarely, a lying size prefix
        return struct.pack(">i", len(body) + rng.choice((-3, 5, 1000))) + bytes(body)
    return struct.pack(">i", len(body)) + bytes(body)


class FuzzReport:
    """What a run saw: answers, closed connections, timeouts, unexpected broker errors."""

    def __init__(self) -> None:
        self.sent = self.answered = self.closed = self.silent = 0
        self.unexpected: list[str] = []

    def __repr__(self) -> str:
        return (
            f"sent {self.sent}, answered {self.answered}, closed {self.closed}, "
            f"no answer {self.silent}, unexpected broker errors {len(self.unexpected)}"
        )


class _Unexpected(logging.Handler):
    def __init__(self, report: FuzzReport) -> None:
        super().__init__(logging.WARNING)
        self.report = report

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "unexpected error" in record.getMessage():
            self.report.unexpected.append(self.format(record))


def _exchange(
    address: tuple[str, int],
    sock: socket.socket | None,
    frame: bytes,
    report: FuzzReport,
    wait: float,
) -> socket.socket | None:
    if sock is None:
        sock = socket.create_connection(address, timeout=wait)
    sock.settimeout(wait)
    report.sent += 1
    try:
        sock.sendall(frame)
        head = sock.recv(4)
        if not head:
            report.closed += 1
            sock.close()
            return None
        report.answered += 1
        # drain the answer
        (size,) = struct.unpack(">i", head.ljust(4, b"\0"))
        remaining = max(0, size - (len(head) - 4))
        while remaining > 0:
            chunk = sock.recv(min(remaining, 1 << 16))
            if not chunk:
                break
            remaining -= len(chunk)
        return sock
    except TimeoutError:
        report.silent += 1  # acks=0, a long poll, or a frame still incomplete: start afresh
    except OSError:
        report.closed += 1
    sock.close()
    return None


def _healthy(address: tuple[str, int]) -> bool:
    from kafka.protocol.consumer.fetch import FetchResponse
    from kafka.protocol.producer.produce import ProduceResponse

    from tests.storage.broker.helpers import RawClient, batch

    with RawClient(address) as client:
        produced = client.call(produce_request("t", 0, batch(1)), ProduceResponse)
        part = produced.responses[0].partition_responses[0]
        if part.error_code != 0:
            return False
        fetched = client.call(fetch_request("t", 0, part.base_offset), FetchResponse)
        return fetched.responses[0].partitions[0].error_code == 0


def run_fuzz(data_dir: Path, iterations: int, seed: int, wait: float = 0.2) -> FuzzReport:
    """Fuzz a fresh broker on ``data_dir``; raises AssertionError if it stops serving."""
    with DataDir(data_dir) as d:
        d.create_topic("t", 2)
    report = FuzzReport()
    handler = _Unexpected(report)
    broker_log = logging.getLogger("storage.broker")
    broker_log.addHandler(handler)
    rng = random.Random(seed)
    frames = seed_frames()
    try:
        with BrokerThread(
            BrokerConfig(
                data_dir=data_dir,
                port=0,
                max_frame_bytes=1 << 20,
                request_timeout=wait * 2,
                max_partitions=200,
            )
        ) as broker:
            assert broker.address is not None
            sock = None
            for i in range(iterations):
                frame = mutate(rng.choice(frames), rng)
                sock = _exchange(broker.address, sock, frame, report, wait)
                if i % 500 == 499:
                    assert _healthy(broker.address), f"the broker stopped serving after {i + 1}"
            if sock is not None:
                sock.close()
            assert _healthy(broker.address), "the broker stopped serving"
    finally:
        broker_log.removeHandler(handler)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description="fuzz the broker with mutated frames")
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--wait", type=float, default=0.1, help="seconds to wait for an answer")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        start = time.monotonic()
        report = run_fuzz(Path(tmp) / "data", args.iterations, args.seed, args.wait)
    print(f"seed {args.seed}: {report} in {time.monotonic() - start:.0f} s")
    for line in report.unexpected[:20]:
        print(line)
    return 1 if report.unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
