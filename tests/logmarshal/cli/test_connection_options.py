"""Every command of ``logmarshal`` honours ``--bootstrap`` and ``--data-dir`` or refuses them
with its reason; none ignores either (README.md, "The CLI").

The table below is the record of each command's decision. A command added to the parser
without a row fails ``test_every_command_has_a_row``; a row is then checked against what the
command declares and against what it does:

- honouring ``--data-dir D`` is seen by holding D's lock here: a command that opens D fails
  on the lock, naming D (one that ignored D would go on elsewhere);
- honouring ``--bootstrap 127.0.0.1:P`` is seen with P bound and not listening: a command
  that connects fails naming that address (one that ignored it would go on elsewhere).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from logmarshal import EmbeddedCluster
from logmarshal.cli.context import commands_of
from logmarshal.cli.main import build_parser

from .conftest import run_process

HONOURS, REFUSES = "honours", "refuses"
TOPOLOGY = "logmarshal.streams.examples:word_count"

#: command -> (arguments that get it as far as opening its data, --bootstrap, --data-dir)
TABLE: dict[str, tuple[list[str], str, str]] = {
    "topic create": (["t"], HONOURS, HONOURS),
    "topic list": ([], HONOURS, HONOURS),
    "topic describe": (["t"], HONOURS, HONOURS),
    "topic delete": (["t"], HONOURS, HONOURS),
    "topic add-partitions": (["t", "--total", "3"], HONOURS, HONOURS),
    "topic alter": (["t", "--set", "retention.ms=1000"], HONOURS, HONOURS),
    "topic adopt": (["t"], REFUSES, HONOURS),
    "produce": (["t"], HONOURS, HONOURS),
    "read": (["t"], HONOURS, HONOURS),
    "demo": (["--records", "10"], HONOURS, HONOURS),
    "broker start": (["--listen", "127.0.0.1:0"], REFUSES, HONOURS),
    "coord export": (["--out", "{tmp}/export"], HONOURS, HONOURS),
    "coord dump": ([], HONOURS, HONOURS),
    "group list": ([], HONOURS, HONOURS),
    "group describe": (["g"], HONOURS, HONOURS),
    "group reset": (["g", "--topic", "t", "--to-earliest"], HONOURS, HONOURS),
    "group pause": (["g", "--for", "5s"], HONOURS, HONOURS),
    "group mirror-offsets": (["g"], HONOURS, REFUSES),
    "audit": (["--out", "{tmp}/audit", "--engine", "local", "--no-report"], HONOURS, HONOURS),
    "streams run": (
        [TOPOLOGY, "--application-id", "a", "--state-dir", "{tmp}/s"],
        HONOURS,
        HONOURS,
    ),
    "streams describe": ([TOPOLOGY], REFUSES, REFUSES),
    "streams demo": (["--lines", "10"], HONOURS, HONOURS),
}
#: variants of a command whose decision depends on its other options
VARIANTS: list[tuple[str, list[str], str, str]] = [
    ("audit", ["--input", "{tmp}/export", "--out", "{tmp}/audit"], REFUSES, REFUSES),
]
#: run as a process: in this one a broker that wrongly started would never return
AS_PROCESS = {"broker start"}


LEAVES = dict(commands_of(build_parser()))
ROWS = [(name, *row) for name, row in TABLE.items()] + VARIANTS
IDS = list(TABLE) + [f"{name} {argv[0]}" for name, argv, _, _ in VARIANTS]


def test_every_command_has_a_row_and_declares_the_same() -> None:
    assert set(LEAVES) - set(TABLE) == set(), "a command without a decision: add it to TABLE"
    assert set(TABLE) - set(LEAVES) == set(), "a row for a command that no longer exists"
    for name, (_argv, bootstrap, data_dir) in TABLE.items():
        source = LEAVES[name].get_default("data_source")
        assert source is not None, f"{name} declares no data source (cli/context.py: declare)"
        assert (source.refuse_bootstrap is None) == (bootstrap == HONOURS), name
        assert (source.refuse_data_dir is None) == (data_dir == HONOURS), name
        assert "where the data comes from:" in LEAVES[name].format_help(), name
    overview = build_parser().format_help()
    for name, leaf in LEAVES.items():
        assert f"  {name}  " in overview and leaf.get_default("data_source").short in overview


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port of 127.0.0.1 bound here and not listening: connecting is refused at once."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _run(cli, name: str, argv: list[str], tmp_path, *options: str) -> tuple[int, str]:
    full = [*options, *name.split(), *(a.replace("{tmp}", str(tmp_path)) for a in argv)]
    if name in AS_PROCESS:
        done = run_process(*full, timeout=60)
        return done.returncode, done.stderr
    code, _out, err = cli(*full)
    return code, err


@pytest.mark.parametrize(("name", "argv", "bootstrap", "data_dir"), ROWS, ids=IDS)
def test_data_dir_is_honoured_or_refused(cli, tmp_path, name, argv, bootstrap, data_dir) -> None:
    locked = tmp_path / "locked"
    with EmbeddedCluster(locked, maintenance_interval=0):
        started = time.monotonic()
        code, err = _run(cli, name, argv, tmp_path, "--data-dir", str(locked))
    assert code == 1, err
    assert err.startswith("logmarshal: error: ") and len(err.strip().splitlines()) == 1, err
    if data_dir == HONOURS:
        assert f"data directory {locked} is locked" in err, err
    else:
        assert "refuses --data-dir" in err, err
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(("name", "argv", "bootstrap", "data_dir"), ROWS, ids=IDS)
def test_bootstrap_is_honoured_or_refused(
    cli, tmp_path, closed_port, name, argv, bootstrap, data_dir
) -> None:
    address = f"127.0.0.1:{closed_port}"
    started = time.monotonic()
    code, err = _run(cli, name, argv, tmp_path, "--bootstrap", address)
    assert code == 1, err
    assert err.startswith("logmarshal: error: ") and len(err.strip().splitlines()) == 1, err
    if bootstrap == HONOURS:
        assert f"cannot reach any broker of --bootstrap: {address}: connection refused" in err
    else:
        assert "refuses --bootstrap" in err, err
    assert time.monotonic() - started < 30  # refused at once: no librdkafka retries


READERS = [
    n
    for n, leaf in LEAVES.items()
    if (s := leaf.get_default("data_source")) is not None
    and s.existing
    and s.refuse_data_dir is None
]


@pytest.mark.parametrize("name", READERS)
def test_a_missing_data_directory_is_an_error_and_stays_missing(cli, tmp_path, name) -> None:
    """A typo in --data-dir must not show an empty cluster (and leave an empty directory)."""
    missing = tmp_path / "no-such-dir"
    code, err = _run(cli, name, TABLE[name][0], tmp_path, "--data-dir", str(missing))
    assert code == 1
    assert f"no data directory at {missing} (given by --data-dir)" in err, err
    assert not missing.exists()


def test_commands_that_write_first_create_the_directory(cli, tmp_path) -> None:
    fresh = tmp_path / "fresh"
    assert cli("--data-dir", str(fresh), "topic", "create", "t")[0] == 0
    assert fresh.is_dir()


def test_the_default_directory_missing_says_how_to_choose_one(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOGMARSHAL_DATA_DIR", raising=False)
    code, _, err = cli("topic", "list")
    assert code == 1 and "no data directory at data" in err
    assert "give --data-dir DIR or --bootstrap HOST:PORT" in err
    monkeypatch.setenv("LOGMARSHAL_DATA_DIR", str(tmp_path / "env-dir"))
    code, _, err = cli("topic", "list")
    assert (
        code == 1 and f"no data directory at {tmp_path / 'env-dir'} ($LOGMARSHAL_DATA_DIR)" in err
    )


def test_a_file_is_not_a_data_directory(cli, tmp_path) -> None:
    path = tmp_path / "file"
    path.write_text("")
    code, _, err = cli("--data-dir", str(path), "topic", "create", "t")
    assert code == 1 and f"data directory {path} is not a directory" in err


@pytest.mark.parametrize(
    ("bootstrap", "shown"),
    [
        ("nonsense", "'nonsense' is not HOST:PORT"),
        ("host:", "'host:' has no valid port"),
        ("host:0", "'host:0' has no valid port"),
        ("host:65536", "'host:65536' has no valid port"),
        ("host:ninety", "'host:ninety' has no valid port"),
        # another script's digits (int() reads them: it connected to port 9092)
        ("host:\u0669\u0660\u0669\u0662", "has no valid port"),
        ("host:\uff19\uff10\uff19\uff12", "has no valid port"),
        (":9092", "':9092' is not HOST:PORT"),
        ("127.0.0.1:9092,oops", "'oops' is not HOST:PORT"),
        ("kafka://h:9092", "'kafka://h:9092' is not HOST:PORT"),
        (",", "needs at least one HOST:PORT"),
    ],
)
def test_a_malformed_bootstrap_is_one_line(cli, bootstrap, shown) -> None:
    started = time.monotonic()
    code, _, err = cli("--bootstrap", bootstrap, "topic", "list")
    assert code == 1 and shown in err and err.count("\n") == 1, err
    assert time.monotonic() - started < 5


def test_an_unknown_host_is_named(cli) -> None:
    code, _, err = cli("--bootstrap", "no-such-host.invalid:9092", "topic", "list")
    assert code == 1 and "no-such-host.invalid:9092: unknown host" in err, err


def test_ipv6_and_several_brokers_parse(cli, closed_port) -> None:
    code, _, err = cli(
        "--bootstrap", f"[::1]:{closed_port},127.0.0.1:{closed_port}", "topic", "list"
    )
    assert code == 1 and f"127.0.0.1:{closed_port}: connection refused" in err, err
    assert f"[::1]:{closed_port}: " in err  # both were tried, each named


def test_a_listener_that_never_answers_fails_within_a_bound(cli) -> None:
    """Something accepts the connection but never speaks Kafka: librdkafka's bounded metadata
    wait (10 s), then one line, not a hang."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        code, _, err = cli("--bootstrap", address, "topic", "list")
        took = time.monotonic() - started
    assert code == 1 and f"cannot reach brokers at {address}" in err, err
    assert "no Kafka broker answered" in err and err.count("\n") == 1
    assert took < 30


def test_bootstrap_and_data_dir_exclude_each_other(cli, tmp_path) -> None:
    code, _, err = cli(
        "--bootstrap", "127.0.0.1:9092", "--data-dir", str(tmp_path), "topic", "list"
    )
    assert code == 1 and "exclude each other" in err


def test_options_after_the_command_name_count_too(cli, closed_port) -> None:
    code, _, err = cli("streams", "describe", TOPOLOGY, "--bootstrap", f"127.0.0.1:{closed_port}")
    assert code == 1
    assert err.strip() == (
        "logmarshal: error: streams describe refuses --bootstrap: it only "
        "prints a topology and opens no cluster"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--bootstrap", "127.0.0.1:9092", "broker", "start"],
            "broker start refuses --bootstrap: a broker serves its own data directory (give "
            "--data-dir DIR); --bootstrap names brokers for a client to connect to",
        ),
        (
            ["--data-dir", "d", "group", "mirror-offsets", "g"],
            "group mirror-offsets refuses --data-dir: mirror-offsets writes Kafka committed "
            "offsets: use --bootstrap (an embedded data directory has no Kafka groups to mirror "
            "into)",
        ),
        (
            ["--data-dir", "d", "streams", "describe", TOPOLOGY],
            "streams describe refuses --data-dir: it only prints a topology and opens no cluster",
        ),
        (
            [
                "--data-dir",
                "d",
                "audit",
                "--input",
                "e",
                "--out",
                "o",
                "--engine",
                "local",
                "--no-report",
            ],
            "audit refuses --data-dir with --input: it reads that export alone and "
            "opens no cluster",
        ),
    ],
)
def test_refusals_say_why(cli, tmp_path, monkeypatch, argv, message) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*argv)
    assert code == 1 and out == ""
    assert err == f"logmarshal: error: {message}\n"
    assert not (tmp_path / "d").exists()
