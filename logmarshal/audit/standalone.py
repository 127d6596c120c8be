"""A Spark standalone cluster (one master, one worker) on 127.0.0.1, from pyspark's own scripts.

For the tests and ``bench/audit.py``, and for anyone who wants to try the ``--master
spark://`` path on one machine: :func:`standalone_cluster` starts both JVMs in their own
process groups, waits until the worker has registered, yields the master URL, and stops
both groups whatever happens (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from .._ports import free_ports
from .deps import require

__all__ = ["spark_bin", "spark_env", "standalone_cluster"]

log = logging.getLogger(__name__)


def spark_bin(name: str) -> str:
    """Path of one of pyspark's scripts (``spark-class``, ``spark-submit``)."""
    pyspark = require("pyspark")
    assert pyspark.__file__ is not None  # (an installed package, not a namespace)
    path = Path(pyspark.__file__).resolve().parent / "bin" / name
    if not path.exists():
        raise FileNotFoundError(f"pyspark has no {path}")
    return str(path)


def spark_env(log_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Environment for Spark's JVMs and spark-submit: loopback only, this interpreter."""
    env = dict(os.environ)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_MASTER_HOST="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOG_DIR=os.fspath(log_dir),
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def _alive_workers(ui_port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as answer:
            return int(json.load(answer).get("aliveworkers", 0))
    except (OSError, ValueError):
        return None


def _stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(grace)


@contextlib.contextmanager
def standalone_cluster(
    work_dir: str | os.PathLike[str],
    *,
    cores: int = 2,
    memory: str = "2g",
    timeout: float = 90.0,
) -> Iterator[str]:
    """Run a master and a worker on 127.0.0.1 while the block runs; yield ``spark://...``."""
    work = Path(work_dir)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    (work / "worker").mkdir(exist_ok=True)
    env = spark_env(work / "logs")
    port, ui, worker_ui = free_ports(3)
    url = f"spark://127.0.0.1:{port}"
    spark_class = spark_bin("spark-class")
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, args: list[str]) -> None:
        with open(work / "logs" / f"{name}.out", "wb") as out:
            procs.append(
                subprocess.Popen(
                    [spark_class, *args],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group, stopped as one
                )
            )

    def wait_for(what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"a Spark JVM exited ({proc.returncode}) while waiting for {what}; "
                        f"see {work / 'logs'}"
                    )
            alive = _alive_workers(ui)
            if alive is not None and (what == "the master" or alive >= 1):
                return
            time.sleep(0.2)
        raise TimeoutError(f"{what} not up within {timeout:.0f} s; see {work / 'logs'}")

    try:
        start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
        )
        wait_for("the master")
        start(
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--webui-port",
                str(worker_ui),
                "--work-dir",
                str(work / "worker"),
                url,
            ],
        )
        wait_for("a worker")
        log.info("Spark standalone cluster up at %s (master UI port %d)", url, ui)
        yield url
    finally:
        for proc in reversed(procs):
            _stop(proc)
