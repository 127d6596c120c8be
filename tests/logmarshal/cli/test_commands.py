from __future__ import annotations

import json
import subprocess
import sys

import pytest

from logmarshal.cli.main import main
from tests.cli_runner import Cli, in_process_cli


@pytest.fixture
def run(tmp_path, monkeypatch, capsys) -> Cli:
    """The CLI in-process (tests/cli_runner.py) against a temporary data dir, an empty stdin
    unless a call gives one; returns (code, stdout, stderr)."""
    monkeypatch.setenv("LOGMARSHAL_DATA_DIR", str(tmp_path / "data"))
    return in_process_cli(capsys, monkeypatch, stdin="")


def test_topic_lifecycle(run) -> None:
    assert run("topic", "create", "events", "--partitions", "3", "-c", "retention.ms=1000")[0] == 0
    code, out, _ = run("topic", "list", "--json")
    assert code == 0
    assert json.loads(out) == [{"topic": "events", "partitions": 3, "records": 0}]
    code, out, _ = run("--json", "topic", "describe", "events")
    described = json.loads(out)
    assert described["partitions"] == 3 and described["config"]["retention.ms"] == "1000"
    assert run("topic", "add-partitions", "events", "--total", "5")[0] == 0
    assert "5 partition(s)" in run("topic", "describe", "events")[1]
    assert run("topic", "delete", "events")[0] == 0
    assert "events" not in run("topic", "list")[1]


def test_produce_then_read(run) -> None:
    run("topic", "create", "t")
    code, out, _ = run("produce", "t", "--key-separator", ":", stdin="a:1\nb:2\nc:3\n")
    assert code == 0 and "produced 3 record(s)" in out
    code, out, _ = run("read", "t", "--partition", "0", "--offset", "1", "--count", "2")
    assert code == 0
    assert out.splitlines() == ["1\tb\t2", "2\tc\t3"]
    code, out, _ = run("read", "t", "--json")
    assert [json.loads(line)["value"] for line in out.splitlines()] == ["1", "2", "3"]


def test_read_says_where_it_stopped_short_of_the_log_end(run, monkeypatch) -> None:
    """A read to the end stopped without a word when the cluster answered nothing below the
    log end (offsets compacted away at the tail; a broker that answered nothing in time,
    made here by one empty answer): the listing looked complete."""
    from logmarshal.cli import records
    from logmarshal.embedded import EmbeddedCluster

    run("topic", "create", "t")
    for line in "abcd":  # a batch each: a fetch answers whole batches
        run("produce", "t", stdin=f"{line}\n")
    fetch = EmbeddedCluster.fetch

    def nothing_at_2(self, topic, partition, offset, **kwargs):
        return [] if offset == 2 else fetch(self, topic, partition, offset, **kwargs)

    monkeypatch.setattr(EmbeddedCluster, "fetch", nothing_at_2)
    monkeypatch.setattr(records, "_FETCH_BYTES", 1)  # a record a fetch
    code, out, err = run("read", "t")
    assert code == 0 and out.splitlines() == ["0\ta", "1\tb"]
    assert "no records from offset 2 on, though t/0 ended at 4 when the read began" in err


def test_produce_stops_at_a_line_without_separator_keeping_the_ones_before(run) -> None:
    run("topic", "create", "t")
    code, _, err = run("produce", "t", "--key-separator", ":", stdin="a:1\nno-separator\nc:3\n")
    assert code == 1
    assert "line 2 has no key separator" in err and "1 line(s) before it were written" in err
    _, out, _ = run("read", "t")
    assert out.splitlines() == ["0\ta\t1"]


def test_produce_names_a_line_that_was_not_written_and_counts_the_rest(run) -> None:
    """A line past the topic's max.message.bytes: the error names the first line not
    written and how many were (it named neither, and printed no summary). The producer
    splits the batch holding it, so the lines around it are written."""
    run("topic", "create", "t", "-c", "max.message.bytes=200")
    code, out, err = run("produce", "t", stdin="a\n" + "x" * 500 + "\nc\n")
    assert code == 1, err
    assert "produced 2 record(s)" in out
    assert "line 2 was not written" in err and "; 2 of 3 were" in err and "more line" not in err
    code, out, err = run("produce", "t", stdin="small\n")
    assert code == 0 and "produced 1 record(s)" in out


def test_produce_to_an_unknown_topic_fails_with_no_input_too(run) -> None:
    run("topic", "create", "t")
    code, _, err = run("produce", "nope", stdin="")
    assert code == 1 and "nope" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["topic", "describe", "missing"], "missing"),
        (["topic", "create", "bad name!"], "bad name!"),
        (["read", "missing"], "missing"),
        (["read", "t", "--partition", "7"], "partitions 0..0, not 7"),
        (["read", "t", "--offset", "99"], "99"),
        (["topic", "create", "t2", "-c", "no.such.config=1"], "no.such.config"),
        (["topic", "add-partitions", "t", "--total", "1"], "t"),
    ],
)
def test_user_mistakes_print_one_line_and_exit_non_zero(run, argv, message) -> None:
    run("topic", "create", "t")
    code, _, err = run(*argv)
    assert code == 1
    assert err.startswith("logmarshal: error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["read", "t", "--offset", "-3"],
        ["topic", "create", "t", "--partitions", "0"],
        ["topic", "create", "t", "-c", "novalue"],
        ["nonsense"],
    ],
)
def test_bad_arguments_are_usage_errors(run, argv) -> None:
    code, _, err = run(*argv)
    assert code == 2 and "usage:" in err and "Traceback" not in err


def test_second_process_on_a_locked_dir_gets_one_line(tmp_path) -> None:
    from logmarshal import connect

    with connect(tmp_path):
        result = subprocess.run(
            [sys.executable, "-m", "logmarshal", "--data-dir", str(tmp_path), "topic", "list"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert str(tmp_path) in result.stderr and "Traceback" not in result.stderr


def test_demo_runs_and_tallies_nothing_lost(run, tmp_path) -> None:
    code, out, _ = run("demo", "--records", "500", "--json", "--data-dir", str(tmp_path / "demo"))
    assert code == 0
    tally = json.loads(out)
    assert tally["produced"] == tally["handled"] == 500
    assert (tally["lost"], tally["misplaced"]) == (0, 0)  # a killed member: repeats allowed
    assert tally["killed"] in {m["member"] for m in tally["members"]}
    assert 0 < tally["failover_seconds"] < 10
    # a member joins after the failover and gets its share: 6 partitions, 3 running members
    assert tally["joined"] not in {tally["killed"]}
    at_end = {m["member"]: m["partitions_at_end"] for m in tally["members"]}
    assert at_end[tally["joined"]] == 2 and at_end[tally["killed"]] == 0
    assert sorted(at_end.values()) == [0, 2, 2, 2]
    assert 0 < tally["rebalance_seconds"] < 10
    # the kept directory holds the demo topic, named for this run
    assert tally["topic"].startswith("demo-events-") and tally["group"].startswith("demo-")
    code, out, _ = run("--data-dir", str(tmp_path / "demo"), "topic", "list", "--json")
    assert {t["topic"]: t for t in json.loads(out)}[tally["topic"]]["records"] == 500


def test_demo_with_a_partition_of_one_record_drains(run, tmp_path) -> None:
    """A partition whose only record is at offset 0 is drained once its holder's position
    is 0; the demo took that position for none and timed out (an attack on the CLI)."""
    code, out, err = run("demo", "--records", "1", "--partitions", "1", "--keys", "1",
                         "--json", "--heartbeat", "0.5", "--data-dir", str(tmp_path / "d"))  # fmt: skip
    assert code == 0, err
    tally = json.loads(out)
    assert (tally["produced"], tally["handled"], tally["lost"]) == (1, 1, 0)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--consumers", "1"], "must be at least 2"),
        (["--heartbeat", "inf"], "must be a number of seconds above 0"),
        (["--heartbeat", "nan"], "must be a number of seconds above 0"),
        (["--heartbeat", "0"], "must be a number of seconds above 0"),
        (["--heartbeat", "-1"], "must be a number of seconds above 0"),
    ],
)
def test_demo_refuses_what_it_cannot_run_at_once(run, args, says) -> None:
    code, _, err = run("demo", *args)
    assert code == 2 and says in err and "Traceback" not in err, err


@pytest.mark.parametrize("wait", ["inf", "nan", "-1", "1e308", "soon"])
def test_read_refuses_a_wait_that_is_no_number_of_seconds(run, wait) -> None:
    """``--wait inf`` and ``--wait 1e308`` showed an OverflowError traceback (attacks on the
    CLI): both are usage errors now, naming the option."""
    assert run("topic", "create", "events")[0] == 0
    code, _, err = run("read", "events", "-n", "5", "--wait", wait)
    assert code == 2 and "argument --wait:" in err and "Traceback" not in err, err
    assert run("read", "events", "-n", "1", "--wait", "0")[0] == 0


def test_a_fetch_wait_that_is_no_number_of_seconds_is_refused(tmp_path) -> None:
    import logmarshal

    with logmarshal.connect(data_dir=tmp_path / "d") as cluster:
        cluster.create_topic("t", 1)
        for wait in (float("inf"), float("nan")):
            with pytest.raises(ValueError, match="max_wait must be a finite"):
                cluster.fetch("t", 0, 0, max_wait=wait)
            with pytest.raises(ValueError, match="max_wait must be a finite"):
                cluster.fetch_batches_many("t", {0: 0}, max_wait=wait)


def test_topic_alter_sets_resets_and_refuses(run) -> None:
    assert run("topic", "create", "events", "-c", "retention.ms=1000")[0] == 0
    code, out, _ = run(
        "topic",
        "alter",
        "events",
        "--set",
        "retention.ms=5000",
        "--set",
        "cleanup.policy=compact,delete",
        "--set",
        "min.insync.replicas=1",
    )
    assert code == 0 and "retention.ms=5000" in out
    described = json.loads(run("--json", "topic", "describe", "events")[1])["config"]
    assert described["retention.ms"] == "5000"
    assert described["cleanup.policy"] == "compact,delete"
    assert run("topic", "alter", "events", "--delete", "retention.ms")[0] == 0
    assert "retention.ms = 604800000" in run("topic", "describe", "events")[1]
    code, _, err = run("topic", "alter", "events", "--set", "no.such=1")
    assert code != 0 and "unknown topic config" in err
    code, _, err = run("topic", "alter", "events")
    assert code != 0 and "nothing to change" in err


def test_topic_alter_over_the_network(tmp_path, capsys) -> None:
    from storage.broker import BrokerConfig, BrokerThread

    with BrokerThread(BrokerConfig(data_dir=tmp_path / "b", port=0)) as broker:
        assert main(["--bootstrap", broker.bootstrap, "topic", "create", "t"]) == 0
        assert (
            main(
                [
                    "--bootstrap",
                    broker.bootstrap,
                    "topic",
                    "alter",
                    "t",
                    "--set",
                    "retention.ms=7777",
                ]
            )
            == 0
        )
        capsys.readouterr()
        assert main(["--bootstrap", broker.bootstrap, "--json", "topic", "describe", "t"]) == 0
        assert json.loads(capsys.readouterr().out)["config"]["retention.ms"] == "7777"


def test_read_json_holds_every_byte_and_every_header(run, tmp_path) -> None:
    """``read --json`` gave bytes that are no UTF-8 backslash-escaped only, so the byte
    0xff and the text ``\\xff`` printed alike, and its headers as a dict by name, so a
    repeated name kept its last value: the document did not hold the record. Bytes that
    are no UTF-8 now come whole in base64 beside the text; headers are a list, in order."""
    import base64

    import logmarshal

    run("topic", "create", "t")
    data = str(tmp_path / "data")
    with logmarshal.connect(data_dir=data) as cluster, logmarshal.Producer(cluster) as producer:
        headers = [("h", b"1"), ("h", b"\xff\x00"), ("n", None)]
        producer.send("t", b"\xff", key=b"k\xfe", headers=headers, partition=0).result()
        producer.send("t", b"\\xff", partition=0).result()
    code, out, _ = run("read", "t", "--json")
    assert code == 0
    raw, text = (json.loads(line) for line in out.splitlines())
    assert base64.b64decode(raw["value_base64"]) == b"\xff"
    assert base64.b64decode(raw["key_base64"]) == b"k\xfe"
    assert raw["value"] == text["value"] == "\\xff"  # (the text alone: alike)
    assert "value_base64" not in text and text["key"] is None
    assert [(h["key"], h["value"]) for h in raw["headers"]] == [
        ("h", "1"),
        ("h", "\\xff\x00"),  # (0x00 is UTF-8: a NUL)
        ("n", None),
    ]
    assert base64.b64decode(raw["headers"][1]["value_base64"]) == b"\xff\x00"
    assert "value_base64" not in raw["headers"][0]
    code, out, _ = run("read", "--help")
    assert "with backslashes).\n\nwhere the data comes from" in out  # (notes apart)


def test_produce_interrupted_says_what_it_wrote(run, monkeypatch, capsys) -> None:
    """Ctrl-C while ``produce`` read its input: the lines read were written, and nothing
    said so (exit 130, no output). An attack on one data directory, 2026-12-06."""
    import sys

    class Interrupted:
        """stdin: two lines, then the user's Ctrl-C."""

        def __iter__(self):
            yield b"a\n"
            yield b"b\n"
            raise KeyboardInterrupt

    from logmarshal.cli.main import main

    run("topic", "create", "t")
    monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": Interrupted()})())
    code = main(["produce", "t"])  # (the runner would give it its own stdin)
    out, err = capsys.readouterr()
    assert code == 130 and "produced 2 record(s)" in out
    assert "interrupted: the 2 line(s) read before it were written" in err
    _, out, _ = run("read", "t", stdin="")
    assert out.splitlines() == ["0\ta", "1\tb"]
