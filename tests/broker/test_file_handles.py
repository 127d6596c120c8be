"""A broker under ``ulimit -n 256`` serves 2,000 partitions: segment files are opened on
demand within the open-file budget and idle ones closed (docs/broker.md)."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys

from kafka.protocol.admin.topics import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceResponse

from storage import decode_records

from .helpers import RawClient, batch, fetch_request, produce_request

N = 2000


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_2000_partitions_under_ulimit_256(tmp_path) -> None:
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, "-m", "logmarshal", "--data-dir", str(tmp_path / "d"), "broker", "start",
         "--listen", "127.0.0.1:0", "--ready-file", str(ready)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_limit_files,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("listening on")
        host, port = ready.read_text().strip().rsplit(":", 1)
        with RawClient((host, int(port)), timeout=60) as client:
            r = CreateTopicsRequest[4]
            created = client.call(r(topics=[r.CreatableTopic(
                name="wide", num_partitions=N, replication_factor=1, assignments=[], configs=[],
            )], timeout_ms=60_000, validate_only=False), CreateTopicsResponse)
            assert created.topics[0].error_code == 0
            for p in range(N):
                answer = client.call(produce_request("wide", p, batch(2, start=p)), ProduceResponse)
                assert answer.responses[0].partition_responses[0].error_code == 0, p
            for p in range(N):
                fetched = client.call(fetch_request("wide", p, 0), FetchResponse)
                part = fetched.responses[0].partitions[0]
                assert part.error_code == 0, p
                values = [rec.value for rec in decode_records(part.records)]
                assert values == [f"v{p}".encode(), f"v{p + 1}".encode()], p
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise
    assert status == 0
