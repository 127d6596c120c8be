"""``--json`` on every command the parser has, run one after the other on one data directory
that holds a topic and a group: each either prints JSON (one document, or one per line where
it prints records or rounds as they come) and exits 0, or exits non-zero with a one-line
refusal naming --json. A command added to the parser and not to ``ARGV`` fails the first test."""

from __future__ import annotations

import json
import time
from pathlib import Path

from logmarshal.cli.context import commands_of
from logmarshal.cli.main import build_parser
from logmarshal.marshaler import COORDINATION_TOPIC
from rationalizer import ClaimingPartition, Heartbeat, coordination_partition, encode
from storage import DataDir, NewRecord, TopicConfig, encode_batch

N_COORD = 2
HB_MS = 60_000  # the holder stays fresh for the whole test: the pause must be 2·HB at least
WORD_COUNT = "logmarshal.streams.examples:word_count"

#: the arguments after the command's name (``{data}``, ``{tmp}``: this test's directories),
#: in the order they run; ``None``: shown elsewhere, for the reason given in ``ELSEWHERE``
ARGV: dict[str, tuple[str, ...]] = {
    "topic create": ("extra", "--partitions", "2"),
    "topic list": (),
    "topic describe": ("t",),
    "topic alter": ("extra", "--set", "retention.ms=60000"),
    "topic add-partitions": ("extra", "--total", "3"),
    "topic delete": ("extra",),
    "produce": ("t", "--key-separator", ":"),
    "read": ("t", "--partition", "0"),
    "group list": (),
    "group describe": ("g",),
    "group reset": ("g", "--topic", "t", "--to-earliest"),  # a dry run: the plan
    "group pause": ("g", "--for", "3m"),
    "coord dump": ("--group", "g"),
    "coord export": ("--out", "{tmp}/export"),
    "streams run": (WORD_COUNT, "--application-id", "wc"),
}
#: commands run without --data-dir (they open no cluster, or one of their own)
NO_DATA_DIR: dict[str, tuple[str, ...]] = {
    "audit": ("--engine", "local", "--input", "{tmp}/export", "--out", "{tmp}/audit"),
    "streams describe": (WORD_COUNT,),
    "demo": ("--records", "60", "--heartbeat", "0.5"),
    "streams demo": ("--lines", "100"),
}
#: commands whose JSON a test of another file shows, and why not here
ELSEWHERE = {
    "broker start": "runs until stopped: tests/logmarshal/cli/test_json.py reads its JSON announcement "
    "from a real broker process",
    "group mirror-offsets": "needs Apache Kafka (--bootstrap): tests/kafka/test_mirror_cli.py",
    "topic adopt": "needs a topic whose topics.json entry was lost: "
    "tests/logmarshal/cli/test_bad_input.py::test_topic_adopt_puts_back_a_topic_whose_metadata_was_lost",
}


def _write_group(data: Path) -> None:
    """Topic ``t`` (2 partitions) and group ``g``: c:i holds t/0 at position 6 and t/1 with none."""
    with DataDir(data) as d:
        d.create_topic(COORDINATION_TOPIC, N_COORD, TopicConfig(timestamp_type="LogAppendTime"))
        d.create_topic("t", 2)
        for p, last in ((0, 6), (1, None)):
            common = dict(client_id="c", instance_id="i", group_id="g", topic="t", partition=p)
            msgs = [ClaimingPartition(heartbeat_interval_ms=HB_MS, **common)]
            if last is not None:
                msgs.append(Heartbeat(last_offset=last, heartbeat_interval_ms=HB_MS, **common))
            for m in msgs:
                key, value = encode(m)
                d.partition(COORDINATION_TOPIC, coordination_partition("t", p, N_COORD)).append(
                    encode_batch([NewRecord(value, key=key, timestamp=int(time.time() * 1000))])
                )


def test_every_command_is_run_here_or_elsewhere() -> None:
    commands = {name for name, _ in commands_of(build_parser())}
    here = set(ARGV) | set(NO_DATA_DIR)
    assert not here & set(ELSEWHERE)
    assert here | set(ELSEWHERE) == commands


def _documents(out: str) -> list[object]:
    """The JSON stdout holds: one document (possibly indented over lines), or one per line."""
    try:
        return [json.loads(out)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in out.splitlines()]


def test_every_command_prints_json_or_refuses_it(cli, tmp_path) -> None:
    data = tmp_path / "data"
    _write_group(data)
    printed: dict[str, list[object]] = {}
    refused: dict[str, str] = {}
    runs = [(name, ("--data-dir", str(data)), argv) for name, argv in ARGV.items()]
    runs += [(name, (), argv) for name, argv in NO_DATA_DIR.items()]
    for name, where, argv in runs:
        args = [a.format(tmp=tmp_path) for a in argv]
        stdin = "k:v1\nk:v2\n" if name == "produce" else None
        code, out, err = cli(*where, "--json", *name.split(), *args, stdin=stdin)
        if code == 0:
            assert out.strip(), f"{name}: exit 0 and nothing printed"
            printed[name] = _documents(out)  # raises if any of it is no JSON
        else:
            assert out == "", f"{name}: exit {code} after printing {out!r}"
            assert len(err.splitlines()) == 1 and "refuses --json" in err, f"{name}: {err!r}"
            refused[name] = err
    assert set(refused) == {"streams run"}
    # the documents are the commands' answers, not empty shells
    assert printed["topic list"] and printed["read"] and printed["coord dump"]
    assert [d["group"] for d in printed["group list"][0]] == ["g"]
    described = printed["group describe"][0]
    assert described["group"] == "g"
    plan = printed["group reset"][0]
    assert plan["executed"] is False
    assert {(p["partition"], p["new"]) for p in plan["partitions"]} == {(0, 0), (1, 0)}
    assert printed["produce"] == [
        {"offsets": printed["produce"][0]["offsets"], "records": 2, "topic": "t"}
    ]
    assert printed["demo"][0]["produced"] == 60
    assert printed["streams demo"][0]["exact"] is True
