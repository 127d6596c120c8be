"""The adapter from Spark's Kafka rows to the export's rows, and the refusals of
``audit --source kafka``, without Kafka or Spark (tests/kafka/test_audit_kafka.py runs them)."""

from __future__ import annotations

import json

import pytest

from logmarshal.audit.export import capture_cut, read_export_info
from logmarshal.audit.kafkasource import (
    KafkaSourceError,
    export_batch,
    reader_options,
    task_failure,
)
from logmarshal.cli.main import main

pa = pytest.importorskip("pyarrow")

MS = 1_795_932_295_186  # an epoch-ms log time


def _kafka_batch(times_us, kinds, unit="us"):
    n = len(times_us)
    return pa.record_batch(
        [
            pa.array([3] * n, pa.int32()),
            pa.array(range(10, 10 + n), pa.int64()),
            pa.array(times_us, pa.timestamp(unit, tz="UTC")),
            pa.array(kinds, pa.int32()),
            pa.array([b"k"] * n, pa.binary()),
            pa.array([b"v%d" % i for i in range(n)], pa.binary()),
        ],
        names=["partition", "offset", "timestamp", "timestampType", "key", "value"],
    )


def test_kafka_rows_become_the_exports_rows_with_exact_milliseconds() -> None:
    out = export_batch(_kafka_batch([MS * 1000, (MS + 1) * 1000], [1, 1]))
    assert out.schema.names == ["coord_partition", "offset", "timestamp_ms", "key", "value"]
    assert out.to_pydict() == {
        "coord_partition": [3, 3],
        "offset": [10, 11],
        "timestamp_ms": [MS, MS + 1],
        "key": [b"k", b"k"],
        "value": [b"v0", b"v1"],
    }
    # whatever unit Arrow carries, the same milliseconds
    assert export_batch(_kafka_batch([MS], [1], unit="ms")).column("timestamp_ms")[0].as_py() == MS


def test_a_record_off_the_brokers_clock_or_between_milliseconds_is_refused() -> None:
    with pytest.raises(
        KafkaSourceError,
        match=r"__marshal/3 offset 11 has timestampType 0 "
        r"\(CreateTime\), not LogAppendTime \(1\)",
    ):
        export_batch(_kafka_batch([MS * 1000, MS * 1000], [1, 0]))
    with pytest.raises(KafkaSourceError, match=r"offset 10: timestamp .* us is not a whole"):
        export_batch(_kafka_batch([MS * 1000 + 1], [1]))


def test_an_executors_refusal_is_found_in_sparks_error() -> None:
    error = RuntimeError("Traceback ...\nlogmarshal.audit.kafkasource.KafkaSourceError: "
                         "__marshal/0 offset 4 has timestampType 0\n  at ...")  # fmt: skip
    assert task_failure(error) == "__marshal/0 offset 4 has timestampType 0"
    assert task_failure(RuntimeError("Py4JJavaError: something else")) is None


def test_the_reader_options_name_the_cut_and_nothing_else(story_cluster, tmp_path) -> None:
    cluster, _script, _at = story_cluster
    info = capture_cut(cluster, tmp_path / "cut", source="kafka b:9092")
    again = read_export_info(tmp_path / "cut")
    assert (again.partitions, again.log_end, again.stored) == (
        info.partitions,
        info.log_end,
        "kafka",
    )
    assert info.records == sum(p.latest - p.earliest for p in info.partitions) > 0
    options = reader_options("b:9092", info)
    ends = {str(p.partition): p.latest for p in info.partitions}
    assert json.loads(options["endingOffsets"]) == {"__marshal": ends}
    assert json.loads(options["startingOffsets"]) == {
        "__marshal": {str(p.partition): p.earliest for p in info.partitions}
    }
    assert json.loads(options["assign"]) == {"__marshal": sorted(int(p) for p in ends)}
    assert options["failOnDataLoss"] == "true" and "minPartitions" not in options


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--source", "kafka", "--input", "x"], "it takes no --input"),
        (["--source", "kafka", "--engine", "local"], "use --engine spark"),
        (["--source", "kafka"], "give --bootstrap HOST:PORT"),
    ],
)
def test_source_kafka_refusals_are_one_line(argv, message, tmp_path, capsys) -> None:
    code = main(["audit", "--out", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_cut_is_not_an_export(story_cluster, tmp_path, capsys) -> None:
    cluster, _script, _at = story_cluster
    capture_cut(cluster, tmp_path / "cut")
    code = main(["audit", "--input", str(tmp_path / "cut"), "--engine", "local",
                 "--out", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "is a cut of __marshal on Kafka" in err, err
