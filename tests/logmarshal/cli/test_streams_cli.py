import pytest

from logmarshal.cli.context import CliError
from logmarshal.cli.main import main
from logmarshal.cli.streams import load_topology


def test_describe_loads_module_attribute(capsys):
    assert main(["streams", "describe", "logmarshal.streams.examples:word_count"]) == 0
    assert "Processor: count (stores: [counts]) --> out <-- lines" in capsys.readouterr().out


def test_load_topology_errors():
    with pytest.raises(CliError, match="expected module:attribute"):
        load_topology("logmarshal.streams.examples")
    with pytest.raises(CliError, match="cannot load"):
        load_topology("logmarshal.streams.examples:nope")
    with pytest.raises(CliError, match="is not a Topology"):
        load_topology("logmarshal.streams.examples:__all__")


@pytest.mark.slow
def test_streams_demo_ends_with_exact_counts(capsys):
    assert main(["streams", "demo", "--lines", "600"]) == 0
    out = capsys.readouterr().out
    assert "exactly the true counts in the store: yes" in out
    assert "ann   minute +0: 3" in out and "bob   minute +1: 2" in out


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_the_streams_demo_ends_on_a_signal_and_leaves_nothing(tmp_path, signame):
    """Ctrl-C while member-2 ran left the process alive for good (its threads were not
    daemons, its Apps never closed, and the cluster closed under them made one spin a core);
    SIGTERM left its temporary directory behind. An attack on the CLI, 2026-12-06."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "logmarshal", "streams", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        for line in proc.stdout:  # (member-2 starts once this is said)
            if "member-2 takes over" in line or time.monotonic() > deadline:
                break
        tasks = f"/proc/{proc.pid}/task"
        started = len(os.listdir(tasks))
        while (
            proc.poll() is None
            and len(os.listdir(tasks)) < started + 3
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)  # (until member-2's threads run: the window the hang was in)
        proc.send_signal(getattr(signal, signame))
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list(tmp_path.iterdir()) == []
