"""``logmarshal demo`` (and ``streams demo``) where the options say: a temporary embedded
cluster by default (README.md, "Two commands": unchanged), ``--data-dir D`` in D, and
``--bootstrap HOST:PORT`` on a real ``logmarshal broker start`` process; on a cluster that
outlives the run the names carry a run tag, so a rerun never collides."""

from __future__ import annotations

import json
import re

import pytest

from .conftest import run_process

TALLY = re.compile(r"^tally: (\d+) produced, (\d+) handled, (\d+) lost, \d+ repeated", re.M)


def _tally(out: str) -> tuple[int, int, int]:
    found = TALLY.search(out)
    assert found, out
    return tuple(int(g) for g in found.groups())  # type: ignore[return-value]


@pytest.mark.slow
def test_demo_without_options_runs_on_a_temporary_cluster(cli, tmp_path, monkeypatch) -> None:
    """Not in $LOGMARSHAL_DATA_DIR either: the demo never writes into the user's data."""
    monkeypatch.setenv("LOGMARSHAL_DATA_DIR", str(tmp_path / "env-data"))
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("demo", "--records", "400", "--heartbeat", "0.5")
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("embedded cluster in ") and first.endswith(" (temporary)")
    assert "created topic 'demo-events' with 6 partitions; group 'demo' of 3" in out
    assert _tally(out) == (400, 400, 0)
    assert "left behind" not in out
    assert list(tmp_path.iterdir()) == []  # no ./data, no env-data


@pytest.mark.slow
def test_demo_in_a_data_dir_twice_keeps_both_runs_apart(cli, tmp_path) -> None:
    data = tmp_path / "demo-data"
    code, out, err = cli("--data-dir", str(data), "demo", "--records", "400", "--heartbeat", "0.5")
    assert code == 0, err
    assert out.splitlines()[0] == f"embedded cluster in {data}"
    assert _tally(out) == (400, 400, 0)
    assert f"Inspect: logmarshal --data-dir {data} group describe demo-" in out
    code, out, err = cli(
        "demo", "--records", "300", "--heartbeat", "0.5", "--json", "--data-dir", str(data)
    )
    assert code == 0, err
    second = json.loads(out)
    assert (second["produced"], second["handled"], second["lost"]) == (300, 300, 0)
    code, out, _ = cli("--data-dir", str(data), "--json", "topic", "list")
    # __marshal and __marshal_snapshots (every member announces its replay configuration
    # there, PROTOCOL.md "Bounded coordination log") are the coordination log's
    records = {
        t["topic"]: t["records"]
        for t in json.loads(out)
        if t["topic"] not in ("__marshal", "__marshal_snapshots")
    }
    assert len(records) == 2 and second["topic"] in records
    assert sorted(records.values()) == [300, 400]
    code, out, _ = cli("--data-dir", str(data), "--json", "group", "list")
    assert {second["group"]} < {g["group"] for g in json.loads(out)}


@pytest.mark.slow
@pytest.mark.long  # (the README's run has the demo embedded and on Kafka: test_demos.py)
def test_demo_on_a_broker_process(broker_process) -> None:
    """Real processes: the broker, and the demo as a client of it; run twice."""
    done = run_process(
        "--bootstrap", broker_process, "demo", "--records", "1000", "--heartbeat", "0.5"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"brokers at {broker_process}"
    assert _tally(done.stdout) == (1000, 1000, 0)
    assert re.search(
        r"^tally: 1000 produced, 1000 handled, 0 lost, \d+ repeated .*, "
        r"0 on the wrong partition$",
        done.stdout,
        re.M,
    )
    topic = re.search(r"created topic '(demo-events-[\w-]+)'", done.stdout).group(1)
    assert f"left behind: topic {topic} (1000 records)" in done.stdout
    again = run_process(
        "--bootstrap", broker_process, "--json", "demo", "--records", "200", "--heartbeat", "0.5"
    )
    assert again.returncode == 0, again.stderr
    tally = json.loads(again.stdout)
    assert tally["topic"] != topic and (tally["handled"], tally["lost"]) == (200, 0)
    listed = run_process("--bootstrap", broker_process, "--json", "topic", "list")
    records = {t["topic"]: t["records"] for t in json.loads(listed.stdout)}
    assert records[topic] == 1000 and records[tally["topic"]] == 200


@pytest.mark.slow
def test_streams_demo_in_a_data_dir(cli, tmp_path) -> None:
    data = tmp_path / "streams-data"
    code, out, err = cli("--data-dir", str(data), "streams", "demo", "--lines", "300")
    assert code == 0, err
    assert out.startswith(f"on embedded data directory {data}; topics and application ids end")
    assert "exactly the true counts in the store: yes" in out
    tag = re.search(r"end in (-\S+)", out).group(1)
    _, listed, _ = cli("--data-dir", str(data), "--json", "topic", "list")
    topics = {t["topic"] for t in json.loads(listed)}
    assert {
        f"lines{tag}",
        f"word-counts{tag}",
        f"clicks{tag}",
        f"wordcount{tag}-counts-changelog",
    } <= topics
