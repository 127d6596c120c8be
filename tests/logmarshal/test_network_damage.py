"""Every reader of ``__marshal`` gets past a stored batch that does not decode over
the network too, skipping it whole as the embedded replay does, and counts it.

As in ``test_marshaler.py``'s embedded test: a claim, then a batch with a valid CRC and
corrupt records stored behind the broker's back (appended to the partition's segment with
record validation off while no broker runs; start-up recovery keeps it, since its length and
CRC are right), then a heartbeat and more records. A broker process is then started on
127.0.0.1 over that data directory, and each network reader (the Marshaler's replay, the
admin reader, ``logmarshal coord export``) must see the records after the damage.
librdkafka alone stalls on this batch without an error (it waits for the record that runs
past the batch), so each of them once stopped there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from logmarshal import EmbeddedCluster
from logmarshal import _direct as direct
from logmarshal.admin.reader import read_coordination
from logmarshal.localbroker import LocalBroker
from logmarshal.marshaler import COORDINATION_TOPIC, Marshaler
from logmarshal.network import NetworkCluster
from tests.storage.corruptions import CORRUPTIONS

HB = 1.0
ROOT = Path(__file__).resolve().parents[2]


def _write_damaged_log(data: Path) -> dict:
    """Claim, damage, heartbeat at 9, claim and heartbeat of a second partition; returns
    what an embedded replay of it says (the reference the network readers must match)."""
    with EmbeddedCluster(data, maintenance_interval=0) as cluster:
        first = Marshaler(cluster, "a", "g", HB, fetch_wait=0.05, coordination_partitions=1)
        try:
            landed = direct.claim_partition(first, "events", 0)
            assert direct.wait_verdict(first, landed, timeout=5) is not None
            plog = cluster._dir.partition(COORDINATION_TOPIC, 0)
            plog.validate_records = False  # store what a validating broker would refuse
            try:
                plog.append(CORRUPTIONS["record length beyond the batch"][0]())
            finally:
                plog.validate_records = True
            damaged = plog.log_end_offset - 1
            direct.wait_verdict(first, direct.heartbeat(first, "events", 0, 9), timeout=5)
            landed = direct.claim_partition(first, "events", 1)
            assert direct.wait_verdict(first, landed, timeout=5) is not None
            direct.wait_verdict(first, direct.heartbeat(first, "events", 1, 41), timeout=5)
            assert first.skipped_batches == 1
            identity = first.identity
            end = plog.log_end_offset
        finally:
            first.close()
        state = read_coordination(cluster)
    return {
        "identity": identity,
        "damaged": damaged,
        "end": end,
        "partitions": state.partitions("g"),
        "skipped": state.skipped_batches,
    }


@pytest.fixture
def damaged(tmp_path) -> Iterator[tuple[str, dict]]:
    """The damaged log, served by a broker process; yields (bootstrap, embedded reference)."""
    data = tmp_path / "data"
    reference = _write_damaged_log(data)  # the embedded cluster is closed: nothing runs now
    with LocalBroker(tmp_path, data_dir=data) as broker:
        yield broker.bootstrap, reference


def test_the_embedded_reference_skips_the_batch(damaged) -> None:
    _, reference = damaged
    assert reference["skipped"] == 1
    by_partition = {s.partition: s for s in reference["partitions"]}
    assert by_partition[0].last_offset == 9 and by_partition[1].last_offset == 41


def test_network_marshaler_replays_past_the_damage(damaged) -> None:
    bootstrap, reference = damaged
    with NetworkCluster(bootstrap, timeout=10) as cluster:
        second = Marshaler(cluster, "b", "g", HB, fetch_wait=0.05, coordination_partitions=1)
        try:
            assert second.wait_caught_up(timeout=20)
            assert second.resume_offset("events", 0) == 10  # the heartbeat after the damage
            assert second.resume_offset("events", 1) == 42
            assert second.holder("events", 1) == reference["identity"]
            assert second.skipped_batches == 1
        finally:
            second.close()


def test_network_admin_reader_reads_past_the_damage(damaged) -> None:
    bootstrap, reference = damaged
    with NetworkCluster(bootstrap, timeout=10) as cluster:
        state = read_coordination(cluster)
    assert state.skipped_batches == 1
    assert state.partitions("g") == reference["partitions"]
    assert state.ends[0] == reference["end"]


def test_coord_export_over_the_network_reads_past_the_damage(damaged, tmp_path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    bootstrap, reference = damaged
    out = tmp_path / "export"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "logmarshal",
            "--bootstrap",
            bootstrap,
            "--json",
            "coord",
            "export",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["skipped_batches"] == 1
    assert "is corrupt" in done.stderr and "skipped" in done.stderr
    offsets = pq.read_table(out / "coordination" / "part-00000.parquet")["offset"].to_pylist()
    assert reference["damaged"] not in offsets
    assert offsets == [o for o in range(reference["end"]) if o != reference["damaged"]]


def test_over_tls_too(tmp_path) -> None:
    """The batches are read over the connection librdkafka would use: TLS with its CA."""
    from storage.broker import BrokerConfig, BrokerThread

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        capture_output=True,
        timeout=60,
    )
    if made.returncode != 0:
        pytest.skip("openssl cannot make a test certificate here")
    data = tmp_path / "data"
    reference = _write_damaged_log(data)
    config = BrokerConfig(data_dir=data, port=0, tls_cert=str(cert), tls_key=str(key))
    with (
        BrokerThread(config) as running,
        NetworkCluster(
            running.bootstrap,
            config={"security.protocol": "SSL", "ssl.ca.location": str(cert)},
            timeout=10,
        ) as cluster,
    ):
        state = read_coordination(cluster)
    assert state.skipped_batches == 1
    assert state.partitions("g") == reference["partitions"]


def test_which_connections_replay_reads_batches_on() -> None:
    """SASL and unfamiliar TLS settings stay with librdkafka (records, not batches)."""
    from logmarshal.network import _batch_transport

    assert _batch_transport({}) == (True, None)
    assert _batch_transport({"security.protocol": "SASL_SSL"}) == (False, None)
    assert _batch_transport({"security.protocol": "SASL_PLAINTEXT"}) == (False, None)
    assert _batch_transport({"security.protocol": "SSL", "ssl.keystore.location": "k"}) == (
        False,
        None,
    )
    ok, context = _batch_transport(
        {"security.protocol": "ssl", "enable.ssl.certificate.verification": "false"}
    )
    assert ok and context is not None and not context.check_hostname


def test_batch_reads_fail_as_the_embedded_cluster_does(damaged) -> None:
    from logmarshal.errors import OffsetOutOfRange, UnknownPartition

    bootstrap, reference = damaged
    with NetworkCluster(bootstrap, timeout=10) as cluster:
        end = reference["end"]
        assert cluster.fetch_batches(COORDINATION_TOPIC, 0, end) == b""
        with pytest.raises(OffsetOutOfRange) as info:
            cluster.fetch_batches(COORDINATION_TOPIC, 0, end + 5)
        assert (info.value.log_start_offset, info.value.log_end_offset) == (0, end)
        with pytest.raises(UnknownPartition):
            cluster.fetch_batches(COORDINATION_TOPIC, 7, 0)
        assert cluster.fetch_batches(COORDINATION_TOPIC, 0, end, max_wait=0.3) == b""  # long poll
