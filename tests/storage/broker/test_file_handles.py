"""A broker under ``ulimit -n 256`` serves 2,000 partitions: segment files are opened on
demand within the open-file budget and idle ones closed (docs/broker.md)."""

from __future__ import annotations

import resource

from kafka.protocol.admin.topics import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceResponse

from logmarshal.localbroker import LocalBroker
from storage import decode_records

from .helpers import RawClient, batch, fetch_request, produce_request

N = 2000


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_2000_partitions_under_ulimit_256(tmp_path) -> None:
    broker = LocalBroker(tmp_path, data_dir=tmp_path / "d", preexec_fn=_limit_files)
    with broker:
        assert broker.first_line().startswith("listening on")
        with RawClient(broker.address, timeout=60) as client:
            r = CreateTopicsRequest[4]
            created = client.call(
                r(
                    topics=[
                        r.CreatableTopic(
                            name="wide",
                            num_partitions=N,
                            replication_factor=1,
                            assignments=[],
                            configs=[],
                        )
                    ],
                    timeout_ms=60_000,
                    validate_only=False,
                ),
                CreateTopicsResponse,
            )
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
        status = broker.stop(timeout=60)  # SIGTERM; SIGKILL (status -9) after 60 s
    assert status == 0
