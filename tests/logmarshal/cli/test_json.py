"""``--json``: every command prints one JSON document (a stream of them, one per record or
round, where it prints records as they come), or refuses the option with one line and
exit 1 and says why in its ``--help``; none ignores it."""

from __future__ import annotations

import io
import json
import socket
import sys
from pathlib import Path

import pytest

from logmarshal.cli.context import commands_of
from logmarshal.cli.main import build_parser
from logmarshal.localbroker import LocalBroker

WORD_COUNT = "logmarshal.streams.examples:word_count"

#: commands that print JSON under --json (shown here, or by the tests of their own folder:
#: tests/admin, tests/audit, tests/kafka/test_mirror.py, tests/logmarshal/cli/test_demo_targets.py)
HONOURED = {
    "topic create",
    "topic list",
    "topic describe",
    "topic delete",
    "topic add-partitions",
    "topic alter",
    "topic adopt",
    "produce",
    "read",
    "demo",
    "broker start",
    "coord export",
    "coord dump",
    "group list",
    "group describe",
    "group reset",
    "group pause",
    "group mirror-offsets",
    "audit",
    "streams describe",
    "streams demo",
}


def _commands() -> dict[str, object]:
    return dict(commands_of(build_parser()))


def test_every_command_honours_or_refuses_json() -> None:
    """A new command must be put in one of the two lists, so none ignores --json unnoticed."""
    commands = _commands()
    refused = {name for name, parser in commands.items() if parser.get_default("json_refusal")}
    assert refused == {"streams run"}
    assert set(commands) - refused == HONOURED


@pytest.mark.parametrize("command", ["streams run"])
def test_a_refusing_command_says_so_in_its_help(command: str, cli) -> None:
    code, out, _ = cli(*command.split(), "--help")
    assert code == 0
    assert "--json is refused: it prints nothing to turn into JSON" in " ".join(out.split())


def test_the_topic_and_record_commands_print_json(cli, tmp_path, monkeypatch) -> None:
    """One document per command (``read``: one per record, as it prints them)."""
    data = str(tmp_path / "data")

    def run(*argv: str) -> list[object]:
        code, out, err = cli("--data-dir", data, "--json", *argv)
        assert code == 0, err
        return [json.loads(line) for line in out.splitlines()]

    created = run("topic", "create", "events", "--partitions", "2")
    assert len(created) == 1 and (created[0]["name"], created[0]["partitions"]) == ("events", 2)
    (altered,) = run("topic", "alter", "events", "--set", "retention.ms=60000")
    assert altered["config"]["retention.ms"] == "60000"
    assert [d["partitions"] for d in run("topic", "add-partitions", "events", "--total", "3")] == [
        3
    ]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"k:v1\nk:v2\n")))
    (produced,) = run("produce", "events", "--key-separator", ":")
    assert produced["records"] == 2 and list(produced["offsets"].values()) == [[0, 1]]
    (partition,) = produced["offsets"]  # one key, one partition
    read = run("read", "events", "--partition", partition)
    assert [(r["key"], r["value"]) for r in read] == [("k", "v1"), ("k", "v2")]
    (described,) = run("topic", "describe", "events")
    assert [p["latest"] for p in described["offsets"]][int(partition)] == 2
    assert run("topic", "delete", "events") == [{"deleted": "events"}]
    assert run("topic", "list") == [[]]
    assert run("group", "list") == [[]]


def test_streams_run_refuses_json_in_one_line(cli, tmp_path) -> None:
    code, out, err = cli(
        "--data-dir",
        str(tmp_path),
        "--json",
        "streams",
        "run",
        WORD_COUNT,
        "--application-id",
        "wc",
    )
    assert code == 1 and out == ""
    assert err.startswith("logmarshal: error: streams run refuses --json: it prints nothing")
    assert len(err.splitlines()) == 1
    # after the command name too, and only --json is refused: without it the command runs
    # as far as its data (here: a source topic that does not exist)
    code, _, err = cli(
        "--data-dir",
        str(tmp_path),
        "streams",
        "run",
        WORD_COUNT,
        "--application-id",
        "wc",
        "--json",
    )
    assert code == 1 and "refuses --json" in err
    code, _, err = cli(
        "--data-dir", str(tmp_path), "streams", "run", WORD_COUNT, "--application-id", "wc"
    )
    assert code == 1 and "refuses --json" not in err and "'lines' does not exist" in err


def test_streams_describe_prints_the_topology_as_json(cli) -> None:
    code, out, err = cli("--json", "streams", "describe", WORD_COUNT)
    assert code == 0, err
    described = json.loads(out)  # one document
    assert described["stores"] == [{"name": "counts", "kind": "memory", "logged": True}]
    (sub,) = described["subtopologies"]
    assert sub["source_topics"] == ["lines"] and sub["stores"] == ["counts"]
    assert sub["nodes"] == [
        {"name": "lines", "type": "source", "topics": ["lines"], "children": ["count"]},
        {
            "name": "count",
            "type": "processor",
            "parents": ["lines"],
            "stores": ["counts"],
            "children": ["out"],
        },
        {
            "name": "out",
            "type": "sink",
            "topic": "word-counts",
            "parents": ["count"],
            "children": [],
        },
    ]
    code, text, _ = cli("streams", "describe", WORD_COUNT)  # without --json: as before
    assert code == 0 and text.startswith("Topology:\n") and "{" not in text
    code, out, _ = cli("streams", "describe", "--help")
    assert "--json: the topology as one JSON document" in " ".join(out.split())


def test_streams_demo_prints_one_json_document(cli) -> None:
    code, out, err = cli("--json", "streams", "demo", "--lines", "300")
    assert code == 0, err
    result = json.loads(out)  # one document, no progress lines around it
    assert result["lines"] == 300 and result["crashed_after"] == 100
    assert result["exact"] is True
    assert result["counts"]["truth"] == {"count": 60, "true": 60}
    assert all(c["count"] == c["true"] for c in result["counts"].values())
    assert {"user": "ann", "minute": 0, "count": 3} in result["clicks_per_minute"]
    assert {"user": "bob", "minute": 1, "count": 2} in result["clicks_per_minute"]
    assert result["topology"]["subtopologies"][0]["source_topics"] == ["lines"]
    assert "left_behind" not in result  # a temporary cluster leaves nothing


@pytest.mark.slow
def test_streams_demo_in_a_data_dir_names_what_it_left_in_json(cli, tmp_path) -> None:
    data = tmp_path / "streams-data"
    code, out, err = cli("--data-dir", str(data), "--json", "streams", "demo", "--lines", "200")
    assert code == 0, err
    result = json.loads(out)
    assert result["exact"] is True and result["where"] == f"embedded data directory {data}"
    _, listed, _ = cli("--data-dir", str(data), "--json", "topic", "list")
    topics = {t["topic"] for t in json.loads(listed)}
    assert set(result["left_behind"]) <= topics
    assert f"lines{result['tag']}" in result["left_behind"]


def test_broker_start_announces_itself_in_json(tmp_path: Path) -> None:
    """A real broker process: its first line is one JSON document naming where it listens."""
    data = tmp_path / "data"
    broker = LocalBroker(tmp_path, data_dir=data, args=["--broker-id", "3"], global_args=["--json"])
    with broker:
        line = broker.first_line()  # the broker flushes it once bound
        ready = json.loads(line)
        assert ready["host"] == "127.0.0.1" and ready["port"] > 0
        assert ready["listening"] == f"127.0.0.1:{ready['port']}" == broker.bootstrap
        assert (ready["broker_id"], ready["data_dir"]) == (3, str(data))
        with socket.create_connection(("127.0.0.1", ready["port"]), timeout=5):
            pass  # it does listen where it says
        assert broker.stop(timeout=20) == 0
    assert broker.stdout_file.read_text() == line + "\n"  # nothing after the one document


def test_broker_start_help_states_its_json(cli) -> None:
    code, out, _ = cli("broker", "start", "--help")
    assert code == 0
    assert '--json: once listening, one JSON document instead of the line "listening on' in (
        " ".join(out.split())
    )


def test_group_reset_refuses_export_with_json(cli, tmp_path) -> None:
    """--export prints the plan as CSV, --json as JSON: asking for both is a mistake, whether
    or not the plan is executed (before, a dry run printed CSV and an execution JSON)."""
    for extra in ((), ("--execute",)):
        code, out, err = cli(
            "--data-dir",
            str(tmp_path),
            "--json",
            "group",
            "reset",
            "g",
            "--topic",
            "t",
            "--to-earliest",
            "--export",
            *extra,
        )
        assert code == 1 and out == ""
        assert (
            err == "logmarshal: error: give either --export (the plan as CSV) or --json, not both\n"
        )
    code, _, err = cli(
        "--data-dir",
        str(tmp_path),
        "group",
        "reset",
        "g",
        "--topic",
        "t",
        "--to-earliest",
        "--export",
    )
    assert code == 1 and "--export" not in err  # without --json it gets as far as the group
    code, out, _ = cli("group", "reset", "--help")
    assert "not with --json" in " ".join(out.split())
