"""Bad command lines an attack on the CLI found accepted: each is refused with one clear
line and changes nothing (a negative broker id, a topic config given twice, an empty
output path, the coordination topics deleted or altered without ``--force``), and a
group position past the log end is shown as the problem it is."""

from __future__ import annotations

import json

import pytest

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal.cli import broker as broker_cli
from tests.cli_runner import Cli, in_process_cli
from tests.logmarshal.audit.logs import LogClock, Script


@pytest.fixture
def run(tmp_path, monkeypatch, capsys) -> Cli:
    """The CLI in this process on a data directory of its own, run from ``tmp_path`` (so a
    path that falls back to the current directory lands there)."""
    monkeypatch.setenv("LOGMARSHAL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return in_process_cli(capsys, monkeypatch, stdin="")


@pytest.fixture
def coordinated(tmp_path) -> EmbeddedCluster:
    """``events`` (1 partition, 10 records) and group ``g`` whose holder's position on it
    is 100: past the log end (the log was cut back, or the topic made again)."""
    path = tmp_path / "data"
    clock = LogClock(1_700_000_000_000)
    with EmbeddedCluster(path, clock=clock, maintenance_interval=0) as cluster:
        cluster.create_topic("events", 1)
        cluster.produce("events", 0, [NewRecord(b"%d" % i, timestamp=1) for i in range(10)])
        s = Script(cluster=cluster, clock=clock, base_ms=1_700_000_000_000, topic="events")
        s.claim("a:1", 0, 0)
        s.beat("a:1", 0, 99, 100)
    return cluster


def _topics(run: Cli) -> list[str]:
    return [t["topic"] for t in json.loads(run("--json", "topic", "list")[1])]


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if not line.startswith("usage:")]
    lines = [line for line in lines if not line.startswith(" ")]  # usage continuation
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_broker_start_refuses_a_negative_broker_id(run, monkeypatch) -> None:
    """Kafka's node.id is at least 0; ``--broker-id -1`` started a broker."""
    started = []
    monkeypatch.setattr(broker_cli, "run_broker", lambda config, on_ready: started.append(config))
    code, _, err = run("broker", "start", "--broker-id", "-1", "--listen", "127.0.0.1:0")
    assert code == 2 and "--broker-id" in _one_error_line(err) and "-1" in err, err
    assert started == []
    code, _, err = run("broker", "start", "--broker-id", "0", "--listen", "127.0.0.1:0")
    assert code == 0 and [c.broker_id for c in started] == [0], err


@pytest.mark.parametrize(
    ("host", "says"),
    [("", "an empty host name"), (" ", "an empty host name"), ("a b", "not a host name"),
     ("broker1:9092", "give the host only")],
)  # fmt: skip
def test_broker_start_refuses_an_advertised_host_that_is_no_host(run, monkeypatch, host, says):
    """``--advertise ''`` started a broker that told every client to connect to host ''."""
    started = []
    monkeypatch.setattr(broker_cli, "run_broker", lambda config, on_ready: started.append(config))
    code, _, err = run("broker", "start", "--listen", "127.0.0.1:0", "--advertise", host)
    assert code == 2 and says in _one_error_line(err), err
    assert started == []
    code, _, err = run("broker", "start", "--listen", "127.0.0.1:0", "--advertise", "broker1")
    assert code == 0 and [c.advertised_host for c in started] == ["broker1"], err


@pytest.mark.parametrize(
    "argv",
    [
        ["group", "mirror-offsets", "g", "--interval", "1e308"],
        ["group", "mirror-offsets", "g", "--interval", "nan"],
        ["group", "mirror-offsets", "g", "--interval", "-1"],
        ["streams", "run", "x:y", "--application-id", "a", "--heartbeat", "-1"],
        ["streams", "run", "x:y", "--application-id", "a", "--heartbeat", "inf"],
    ],
)
def test_durations_out_of_range_are_usage_errors(run, argv) -> None:
    """``--interval 1e308`` reached ``time.sleep`` (OverflowError), ``--heartbeat -1`` the
    App: durations are checked where they are parsed."""
    code, _, err = run(*argv)
    assert code == 2 and f"argument {argv[-2]}:" in _one_error_line(err), err


def test_a_topology_factory_that_fails_is_one_error_line(run) -> None:
    """``streams describe json:loads`` showed the TypeError's traceback: a factory that
    raises is the user's error, named with the spec."""
    code, _, err = run("streams", "describe", "json:loads")
    line = _one_error_line(err)
    assert code == 1 and "json:loads() failed: TypeError" in line, err


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("raise RuntimeError('boom')\n", "raised RuntimeError at "),
        ("x = (\n", "raised SyntaxError: '(' was never closed"),
    ],
)
def test_a_topology_module_that_fails_to_import_is_one_error_line(
    run, tmp_path, monkeypatch, source, says
) -> None:
    """A module that raised as it was imported was a traceback (found by an attack on the
    CLI); now one line names the module, the error and where it was raised."""
    (tmp_path / "broken_topology.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _, err = run("streams", "describe", "broken_topology:t")
    line = _one_error_line(err)
    assert code == 1 and "importing broken_topology" in line and says in line, err


def test_topic_create_makes_the_coordination_topics_as_a_marshaler_does(run, tmp_path) -> None:
    """``topic create __marshal`` made a CreateTime topic (the default) that every Marshaler
    refused, and whose timestamp type cannot be altered on a __ topic. It now takes the
    configs a Marshaler creates it with, and refuses a config that would break them."""
    from logmarshal import Marshaler, connect

    code, _, err = run("topic", "create", COORDINATION_TOPIC, "-c",
                       "message.timestamp.type=CreateTime")  # fmt: skip
    assert code == 1 and "message.timestamp.type=CreateTime" in _one_error_line(err), err
    assert not (tmp_path / "data" / f"{COORDINATION_TOPIC}-0").exists()
    for topic in (COORDINATION_TOPIC, SNAPSHOT_TOPIC):
        assert run("topic", "create", topic, "-p", "2")[0] == 0
    config = json.loads(run("--json", "topic", "describe", COORDINATION_TOPIC)[1])["config"]
    assert config["message.timestamp.type"] == "LogAppendTime"
    assert config["retention.ms"] == "-1" and config["flush.messages"] == "1"
    with connect(data_dir="data") as cluster:
        Marshaler(cluster, "a", "g", 1.0, coordination_partitions=2).close()


def test_broker_start_names_the_file_it_could_not_write(run, monkeypatch) -> None:
    """On a full data directory the broker said "cannot listen on 127.0.0.1:PORT: No space
    left on device" (a helper's attack): an error of a file is named as one."""
    import errno

    def full(config, on_ready):
        raise OSError(errno.ENOSPC, "No space left on device", "data/producer-ids.json")

    monkeypatch.setattr(broker_cli, "run_broker", full)
    code, _, err = run("broker", "start", "--listen", "127.0.0.1:0")
    line = _one_error_line(err)
    assert code == 1 and "cannot listen" not in line, err
    assert "data/producer-ids.json: No space left on device" in line


def test_broker_start_on_a_full_disk_names_the_data_directory(run, monkeypatch) -> None:
    """The lock file's write on a full disk raises an OSError that names no file: it was
    said as "cannot listen on 127.0.0.1:0: No space left on device" (an attack on one data
    directory, 2026-12-06). A busy address is still "cannot listen"."""
    import errno
    import socket

    import storage._datadir as datadir

    def full(*_args) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(datadir.os, "pwrite", full)
        code, _, err = run("broker", "start", "--listen", "127.0.0.1:0")
    line = _one_error_line(err)
    assert code == 1 and "cannot listen" not in line, err
    assert "data/.lock: No space left on device" in line
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run("broker", "start", "--listen", f"127.0.0.1:{port}")
    assert code == 1 and f"cannot listen on 127.0.0.1:{port}: " in _one_error_line(err), err


def test_broker_start_names_the_metrics_port_and_the_ready_file_it_could_not_use(
    run, tmp_path
) -> None:
    """A busy ``--metrics-port`` was said as "cannot listen on 127.0.0.1:0" (the broker's
    address, which was free); a ``--ready-file`` naming a directory left ``DIR.tmp`` behind
    (found by an attack on the CLI)."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run("broker", "start", "--listen", "127.0.0.1:0", "--metrics-port",
                           str(port))  # fmt: skip
    line = _one_error_line(err)
    assert code == 1 and f"cannot serve metrics on 127.0.0.1:{port}" in line, err
    (tmp_path / "ready").mkdir()
    code, _, err = run("broker", "start", "--listen", "127.0.0.1:0", "--ready-file", "ready")
    line = _one_error_line(err)
    assert code == 1 and "ready: a directory is where this file belongs" in line, err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ready")) == ["ready"]


def test_an_admin_key_file_that_is_a_directory_is_named(run, tmp_path) -> None:
    """It was "Is a directory: 31": the descriptor's number, not the path."""
    (tmp_path / "keys").mkdir()
    assert run("topic", "create", "t")[0] == 0
    code, _, err = run("group", "list", "--admin-key-file", "keys")
    assert code == 1 and "admin key file keys is not a regular file" in _one_error_line(err)


def test_leniencies_the_cli_attack_found_are_refused(run, tmp_path) -> None:
    """``--partitioner`` beside ``--partition`` was ignored, ``streams demo --lines -5`` got
    past the parser, and digits of other scripts were read as numbers ("٣" as 3)."""
    assert run("topic", "create", "t")[0] == 0
    code, _, err = run("produce", "t", "--partition", "0", "--partitioner", "round_robin")
    assert code == 2 and "not allowed with argument" in err, err
    code, _, err = run("streams", "demo", "--lines", "-5")
    assert code == 2 and "must be at least 1, got -5" in err, err
    code, _, err = run("read", "t", "--count", "٣")
    assert code == 2 and "expected a whole number" in err, err
    code, _, err = run("read", "t", "--count", "1_0")  # (int() reads it as 10)
    assert code == 2 and "expected a whole number" in err, err
    code, _, err = run("--data-dir", "", "topic", "list")  # (it used the default quietly)
    assert code == 2 and "--data-dir: an empty path" in err, err
    (tmp_path / "plan.csv").write_text("t,0,٣\n")
    code, _, err = run("group", "reset", "g", "--from-file", "plan.csv", "--dry-run")
    assert code == 1 and "must be whole numbers" in err, err


def test_read_refuses_wait_without_count(run) -> None:
    """``read --wait 5`` without ``--count`` returned at once, the wait ignored."""
    assert run("topic", "create", "t")[0] == 0
    code, _, err = run("read", "t", "--wait", "5")
    assert code == 1 and "--wait needs --count" in _one_error_line(err)


@pytest.mark.parametrize(
    ("argv", "key"),
    [
        (["--set", "retention.ms=1000", "--set", "retention.ms=2000"], "retention.ms"),
        (["--set", "segment.ms=60000", "--delete", "segment.ms"], "segment.ms"),
        (["--delete", "flush.ms", "--delete", " flush.ms"], "flush.ms"),
    ],
)
def test_topic_alter_refuses_a_config_named_twice(run, argv, key) -> None:
    """The last of two --set of one key won without a word (Kafka's broker refuses a request
    naming a key twice: "duplicate config keys")."""
    assert run("topic", "create", "events", "-c", "retention.ms=5000")[0] == 0
    code, out, err = run("topic", "alter", "events", *argv)
    assert code == 1 and out == "", err
    line = _one_error_line(err)
    assert line.startswith("logmarshal: error: ") and repr(key) in line and "twice" in line
    described = json.loads(run("--json", "topic", "describe", "events")[1])["config"]
    assert described["retention.ms"] == "5000"  # nothing changed


def test_topic_create_names_the_config_given_twice(run) -> None:
    code, _, err = run("topic", "create", "t", "-c", "retention.ms=1", "-c", "retention.ms=2")
    assert code == 1 and "'retention.ms'" in _one_error_line(err), err
    assert "t" not in run("topic", "list", "--json")[1]


def test_a_config_out_of_range_is_named_as_kafka_names_it(run) -> None:
    """The range error named the Python attribute (retention_ms)."""
    assert run("topic", "create", "events")[0] == 0
    code, _, err = run("topic", "alter", "events", "--set", "retention.ms=-5")
    line = _one_error_line(err)
    assert code == 1 and "retention.ms must be" in line and "retention_ms" not in line, err


@pytest.mark.parametrize("command", [["coord", "export"], ["audit", "--engine", "local"]])
def test_an_empty_output_path_is_refused(run, coordinated, tmp_path, command) -> None:
    """``--out ""`` wrote the export into the current directory."""
    before = sorted(p.name for p in tmp_path.iterdir())
    code, _, err = run(*command, "--out", "")
    assert code == 2 and "--out" in _one_error_line(err) and "empty" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("topic", [COORDINATION_TOPIC, SNAPSHOT_TOPIC])
def test_the_coordination_topics_are_not_deleted_without_force(run, coordinated, topic) -> None:
    """Deleting __marshal (or its snapshots) took every group's coordination state with it,
    without a word; Kafka's topic tool refused to delete its internal topics."""
    if topic == SNAPSHOT_TOPIC:  # (as many partitions as __marshal, as a Marshaler makes it)
        n = json.loads(run("--json", "topic", "describe", COORDINATION_TOPIC)[1])["partitions"]
        assert run("topic", "create", SNAPSHOT_TOPIC, "--partitions", str(n))[0] == 0
    code, out, err = run("topic", "delete", topic)
    line = _one_error_line(err)
    assert code == 1 and out == "" and topic in line and "--force" in line, err
    assert topic in _topics(run)
    assert run("group", "describe", "g")[0] == 0
    code, _, err = run("topic", "delete", topic, "--force")
    assert code == 0, err
    assert topic not in _topics(run)


def test_the_coordination_topic_is_not_altered_without_force(run, coordinated) -> None:
    """A retention put on __marshal (or its default back) removes coordination records; more
    partitions move groups' keys to other coordination partitions."""
    before = json.loads(run("--json", "topic", "describe", COORDINATION_TOPIC)[1])
    for change in (
        ["alter", COORDINATION_TOPIC, "--set", "retention.ms=1000"],
        ["alter", COORDINATION_TOPIC, "--delete", "retention.ms"],
        ["add-partitions", COORDINATION_TOPIC, "--total", "9"],
    ):
        code, _, err = run("topic", *change)
        line = _one_error_line(err)
        assert code == 1 and COORDINATION_TOPIC in line and "--force" in line, err
    after = json.loads(run("--json", "topic", "describe", COORDINATION_TOPIC)[1])
    assert (after["config"], after["partitions"]) == (before["config"], before["partitions"])
    code, _, err = run("topic", "alter", COORDINATION_TOPIC, "--set", "segment.ms=3600000",
                       "--force")  # fmt: skip
    assert code == 0, err


def test_force_is_explained_in_help(run) -> None:
    for verb in ("delete", "alter", "add-partitions"):
        code, out, _ = run("topic", verb, "--help")
        assert code == 0 and "--force" in out and COORDINATION_TOPIC in out


def test_group_describe_shows_a_position_past_the_log_end(run, coordinated) -> None:
    """It showed "lag 0" and status OK for a position 90 records past the end."""
    code, out, err = run("--json", "group", "describe", "g")
    assert code == 0, err
    described = json.loads(out)
    (p,) = described["partitions"]
    assert (p["position"], p["log_end"], p["lag"], p["status"]) == (100, 10, -90, "PAST_END")
    assert described["status"] == "PAST_END"
    code, out, _ = run("group", "describe", "g")
    assert "status PAST_END" in out.splitlines()[0]
    row = out.splitlines()[-1].split()
    assert row[-2:] == ["-90", "PAST_END"]


def test_topic_adopt_puts_back_a_topic_whose_metadata_was_lost(run, tmp_path) -> None:
    """The way on from a lost or damaged topics.json, on the command line: the topic and
    its records are read again; __marshal gets the configs logmarshal makes it with (its
    replay relies on LogAppendTime); --bootstrap is refused (a broker's files are adopted
    where they are, the broker stopped)."""
    assert run("topic", "create", "events", "--partitions", "2")[0] == 0
    with EmbeddedCluster(tmp_path / "data") as cluster:
        cluster.produce("events", 1, [NewRecord(b"kept", timestamp=1)])
        cluster.create_topic(COORDINATION_TOPIC, 2)  # CreateTime: not what it was made with
        cluster.produce(COORDINATION_TOPIC, 0, [NewRecord(b"x", timestamp=1)])
    (tmp_path / "data" / "topics.json").unlink()
    assert _topics(run) == []
    code, out, err = run("topic", "adopt", "events", "--partitions", "2")
    assert code == 0 and "adopted topic 'events' with 2 partition(s)" in out, err
    assert run("read", "events", "-p", "1")[1] == "0\tkept\n"
    code, out, err = run("--json", "topic", "adopt", COORDINATION_TOPIC)
    assert code == 0, err
    assert json.loads(out)["config"]["message.timestamp.type"] == "LogAppendTime"
    code, _, err = run("topic", "adopt", "events")
    assert code == 1 and "already exists" in _one_error_line(err)
    code, _, err = run("--bootstrap", "127.0.0.1:1", "topic", "adopt", "x")
    assert code == 1 and "refuses --bootstrap" in _one_error_line(err)


def test_a_table_cell_that_does_not_print_is_escaped() -> None:
    """Ids come from the log: a client id ``x\\n\\x1b[31mRED`` broke a ``coord dump`` row
    across two lines and sent its escape to the operator's terminal (an attack on the
    audit tools, 2026-12-06). Text that prints, é included, is shown as it is."""
    import io

    from logmarshal.cli.output import print_table

    out = io.StringIO()
    print_table(
        [{"client": "x\n\x1b[31mRED\x1b[0m\ttab", "group": "é"}, {"client": "b", "group": "g"}],
        ["client", "group"],
        out,
    )
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "\x1b" not in out.getvalue()
    assert lines[1].split() == ["x\\n\\x1b[31mRED\\x1b[0m\\ttab", "é"]


@pytest.mark.parametrize("argv", [("topic", "list"), ("read", "t"), ("--json", "read", "t")])
def test_a_reader_gone_before_the_output_is_written_is_no_error(tmp_path, argv) -> None:
    """``logmarshal read t | head -n 0``: output smaller than stdout's buffer was flushed by
    the interpreter at exit, after main() had returned, and failed there ("Exception ignored
    ... BrokenPipeError", exit 120). An attack on one data directory, 2026-12-06."""
    import os
    import subprocess
    import sys

    from .conftest import ROOT

    data = tmp_path / "data"
    with EmbeddedCluster(data, maintenance_interval=0) as cluster:
        cluster.create_topic("t", 1)
        cluster.produce("t", 0, [NewRecord(b"v%d" % i, timestamp=0) for i in range(5)])
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "logmarshal", "--data-dir", str(data), *argv],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT, env=env,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")
