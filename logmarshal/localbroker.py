"""logmarshal's own broker (``logmarshal broker start``) as a process of its own on 127.0.0.1,
for tests, benches and the process harness; the counterpart of :mod:`logmarshal.localkafka`.

One way to start it, so that every caller gets the same guarantees: a free port (or the port
of its last start, so a restart keeps its address), ready only once the broker has written
its address to its ready file, its output kept in files beside that ready file, and every
signal sent to the pid this object started, never to anything else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["BrokerStartError", "LocalBroker"]

log = logging.getLogger(__name__)

#: the directory holding this ``logmarshal`` package: the broker process imports the same code
_CODE = Path(__file__).resolve().parents[1]


class BrokerStartError(RuntimeError):
    """The broker process exited, or did not name its address in time."""


class LocalBroker:
    """``logmarshal broker start`` serving ``data_dir`` (default ``workdir/data``).

    Use as a context manager, or :meth:`start` / :meth:`stop`. ``workdir`` holds
    ``NAME.ready`` and each start's output, ``NAME.N.out`` and ``NAME.N.err``. ``args`` are
    more ``broker start`` options, ``global_args`` options before the command (``--json``),
    ``python_args`` interpreter options (``-m cProfile -o FILE``), ``env`` variables added to
    this process's. ``preexec_fn`` runs in the child before the broker (a resource limit).
    ``inherit_stderr`` leaves the broker's stderr on this process's instead of a file.
    """

    def __init__(
        self,
        workdir: Path | str,
        *,
        data_dir: Path | str | None = None,
        name: str = "broker",
        port: int = 0,
        args: Sequence[str] = (),
        global_args: Sequence[str] = (),
        python_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        preexec_fn: Callable[[], None] | None = None,
        inherit_stderr: bool = False,
        start_timeout: float = 30.0,
    ) -> None:
        self.workdir = Path(workdir)
        self.data_dir = Path(data_dir) if data_dir is not None else self.workdir / "data"
        self.name = name
        self.port = port
        self.args = list(args)
        self.global_args = list(global_args)
        self.python_args = list(python_args)
        self.env = dict(env or {})
        self.preexec_fn = preexec_fn
        self.inherit_stderr = inherit_stderr
        self.start_timeout = start_timeout
        self.ready_file = self.workdir / f"{name}.ready"
        self.proc: subprocess.Popen[bytes] | None = None
        self.generation = 0

    # -- where it is --------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` (the port is known once :meth:`start` has returned)."""
        return f"127.0.0.1:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def pid(self) -> int | None:
        """None while it is not running."""
        return None if self.proc is None or self.proc.poll() is not None else self.proc.pid

    @property
    def alive(self) -> bool:
        return self.pid is not None

    @property
    def stdout_file(self) -> Path:
        return self.workdir / f"{self.name}.{self.generation}.out"

    @property
    def stderr_file(self) -> Path:
        return self.workdir / f"{self.name}.{self.generation}.err"

    def output(self) -> str:
        """What the current (or last) start printed: stdout, then stderr."""
        return "".join(
            path.read_text(errors="replace")
            for path in (self.stdout_file, self.stderr_file)
            if path.exists()
        )

    def first_line(self, timeout: float = 10.0) -> str:
        """The first line it printed (``listening on HOST:PORT``, or one JSON document under
        ``--json``); it prints it just after writing its ready file, so this waits a little."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.stdout_file.read_text() if self.stdout_file.exists() else ""
            if "\n" in text:
                return text.split("\n", 1)[0]
            if self.pid is None or time.monotonic() > deadline:
                raise BrokerStartError(f"{self.name} printed no line: {self.output()[-2000:]}")
            time.sleep(0.02)

    # -- life cycle ----------------------------------------------------------------------------

    def command(self) -> list[str]:
        argv = [sys.executable, *self.python_args, "-m", "logmarshal", *self.global_args]
        argv += ["--data-dir", str(self.data_dir), "broker", "start"]
        argv += ["--listen", self.bootstrap, "--ready-file", str(self.ready_file), *self.args]
        return argv

    def start(self) -> LocalBroker:
        """Start it (again: on the port of its last start, on the same data); returns once its
        ready file names its address."""
        if self.pid is not None:
            raise RuntimeError(f"{self.name} is running (pid {self.pid})")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)
        self.generation += 1
        path = os.pathsep.join(p for p in (str(_CODE), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path, **self.env}
        with contextlib.ExitStack() as files:
            out = files.enter_context(open(self.stdout_file, "wb"))
            err = None if self.inherit_stderr else files.enter_context(open(self.stderr_file, "wb"))
            self.proc = subprocess.Popen(
                self.command(), cwd=_CODE, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=err, start_new_session=True, preexec_fn=self.preexec_fn,
            )  # fmt: skip
        log.debug("%s started, pid %d", self.name, self.proc.pid)
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            text = self.ready_file.read_text().strip() if self.ready_file.exists() else ""
            if text:  # written whole (a rename), so never half an address
                self.port = int(text.rsplit(":", 1)[1])
                return
            if self.pid is None:
                raise BrokerStartError(f"{self.name} exited: {self.output()[-2000:]}")
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"{self.name} named no address within {self.start_timeout:g} s: "
                    f"{self.output()[-2000:]}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (after SIGCONT, in case it is paused): it flushes, releases its data
        directory and exits; SIGKILL if it has not within ``timeout`` s. Its exit status (None if
        it was never started)."""
        if self.proc is None:
            return None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s did not exit within %g s of SIGTERM; killing it", self.name, timeout)
            self.kill()
            return self.proc.returncode

    def kill(self) -> None:
        """kill -9: no shutdown, no flush beyond what the OS has (a paused process dies too)."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)

    def signal(self, sig: int) -> None:
        """Send ``sig`` (SIGSTOP and SIGCONT pause and resume it) to the broker's pid, if it
        is still running."""
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def __enter__(self) -> LocalBroker:
        # ``with LocalBroker(d).start() as b`` too: started already, it is this one (it
        # raised "is running" and left the process it had started running)
        return self if self.pid is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
