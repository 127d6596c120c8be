"""What one large, well-formed request costs the broker's other clients.

    python bench/broker_large_requests.py [--mb 4] [--kinds list_offsets,metadata,...]
                                          [--baseline-ref REF]

A broker (``logmarshal broker start`` on 127.0.0.1, started here and stopped at the end)
gets one request of about ``--mb`` MB of each kind, while another client sends ApiVersions
every 20 ms on a connection of its own; the figure is that client's worst wait while the
large request is handled, beside its worst wait over as long with no large request (the
baseline in the same run). ``--baseline-ref`` also runs the broker of that commit (its tree
from ``git archive``, its extensions built: bench/_baseline.py), side by side.

Figures, not pass/fail (docs/broker.md, "One large, well-formed request").
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from _baseline import extract  # (bench/: a script's directory is on its path)

ROOT = Path(__file__).resolve().parent.parent


def _s16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _frame(api_key: int, version: int, body: bytes, correlation: int = 1) -> bytes:
    payload = struct.pack(">hhi", api_key, version, correlation) + _s16("bench") + body
    return struct.pack(">i", len(payload)) + payload


def _list_offsets(n: int) -> bytes:  # v1, partitions of a topic that does not exist
    body = struct.pack(">ii", -1, 1) + _s16("nope") + struct.pack(">i", n)
    return _frame(2, 1, body + struct.pack(">iq", 0, -1) * n)


def _fetch(n: int) -> bytes:  # v11, n partitions of "t" (3 exist)
    head = struct.pack(">iiiib", -1, 0, 1, 1 << 20, 0) + struct.pack(">ii", 0, -1)
    parts = b"".join(struct.pack(">iiqqi", i, -1, 0, 0, 1024) for i in range(n))
    tail = struct.pack(">i", 0) + _s16("")
    return _frame(
        1, 11, head + struct.pack(">i", 1) + _s16("t") + struct.pack(">i", n) + parts + tail
    )


def _metadata(n: int) -> bytes:  # v1, names of topics that do not exist
    names = b"".join(_s16(f"t{i:07d}") for i in range(n))
    return _frame(3, 1, struct.pack(">i", n) + names)


def _offset_fetch(n: int) -> bytes:  # v1
    body = _s16("g") + struct.pack(">i", 1) + _s16("t") + struct.pack(">i", n)
    return _frame(9, 1, body + struct.pack(">i", 0) * n)


def _describe_configs(n: int) -> bytes:  # v1, one topic named n times
    resource = struct.pack(">b", 2) + _s16("t") + struct.pack(">i", -1)
    return _frame(32, 1, struct.pack(">i", n) + resource * n + b"\x00")


def _produce(n: int) -> bytes:  # v3, n null record sets of a topic that does not exist
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 1) + _s16("nope")
    return _frame(0, 3, body + struct.pack(">i", n) + struct.pack(">ii", 0, -1) * n)


#: kind -> (request of n entries, bytes per entry)
KINDS: dict[str, tuple[Callable[[int], bytes], int]] = {
    "list_offsets": (_list_offsets, 12),
    "fetch": (_fetch, 28),
    "metadata": (_metadata, 10),
    "offset_fetch": (_offset_fetch, 4),
    "describe_configs": (_describe_configs, 9),
    "produce": (_produce, 8),
}


def _recv_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(min(n - len(out), 1 << 20))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return bytes(out)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


class _Ticker(threading.Thread):
    """A well-behaved client: ApiVersions every 20 ms; the worst wait since ``reset``."""

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(daemon=True)
        self._sock = socket.create_connection(address, timeout=300)
        self._halt = threading.Event()
        self.worst = 0.0

    def run(self) -> None:
        n = 0
        while not self._halt.is_set():
            n += 1
            started = time.perf_counter()
            self._sock.sendall(_frame(18, 0, b"", n))
            _recv_frame(self._sock)
            self.worst = max(self.worst, time.perf_counter() - started)
            time.sleep(0.02)

    def stop(self) -> None:
        self._halt.set()
        self.join(310)
        self._sock.close()


def _measure(address: tuple[str, int], request: bytes) -> tuple[float, float, float]:
    """(seconds until the large request was answered, the ticker's worst wait meanwhile,
    its worst wait over as long with no large request)."""
    ticker = _Ticker(address)
    ticker.start()
    try:
        time.sleep(0.3)
        ticker.worst = 0.0
        started = time.perf_counter()
        with socket.create_connection(address, timeout=300) as sock:
            sock.sendall(request)
            _recv_frame(sock)
        took = time.perf_counter() - started
        during, ticker.worst = ticker.worst, 0.0
        time.sleep(min(took, 5.0))
        idle = ticker.worst
    finally:
        ticker.stop()
    return took, during, idle


def _start_broker(tree: Path, tmp: str) -> tuple[subprocess.Popen, tuple[str, int]]:
    """``logmarshal broker start`` of ``tree`` (run from it, so its code is imported, not
    this tree's), on 127.0.0.1; returns once its ready file names its address."""
    ready = Path(tmp) / "ready"
    argv = [sys.executable, "-m", "logmarshal", "--data-dir", str(Path(tmp) / "data"),
            "broker", "start", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
            "--max-frame-bytes", str(64 << 20)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(
        argv, cwd=tree, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while not (ready.exists() and ready.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the broker of {tree} did not start")
        time.sleep(0.05)
    host, port = ready.read_text().strip().rsplit(":", 1)
    return proc, (host, int(port))


def _run_tree(label: str, tree: Path, kinds: list[str], mb: float, out: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-large-") as tmp:
        proc, address = _start_broker(tree, tmp)
        try:
            subprocess.run(
                [sys.executable, "-m", "logmarshal", "topic", "create", "t", "--partitions", "3",
                 "--bootstrap", f"{address[0]}:{address[1]}"],
                cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True,
                capture_output=True,
            )  # fmt: skip
            for kind in kinds:
                build, per = KINDS[kind]
                request = build(int(mb * 1e6 / per))
                out[(label, kind)] = (len(request) / 1e6, *_measure(address, request))
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=4.0, help="size of each large request")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    parser.add_argument("--baseline-ref", help="also run this commit's broker, side by side")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    print(
        f"bench/broker_large_requests.py  python {sys.version.split()[0]}  cores {os.cpu_count()}"
    )
    trees = [("this tree", ROOT)]
    if args.baseline_ref:
        trees.append((f"@ {args.baseline_ref}", extract(args.baseline_ref, "large")))
    results: dict = {}
    for label, tree in trees:
        _run_tree(label, tree, kinds, args.mb, results)
    head = f"{'request':18s} {'MB':>5s}"
    for label, _ in trees:
        head += f" | {label + ': answered s':>24s} {'worst wait s':>12s} {'idle s':>7s}"
    print(head)
    for kind in kinds:
        mb = results[(trees[0][0], kind)][0]
        row = f"{kind:18s} {mb:5.1f}"
        for label, _ in trees:
            _, took, during, idle = results[(label, kind)]
            row += f" | {took:24.2f} {during:12.3f} {idle:7.3f}"
        print(row)


if __name__ == "__main__":
    main()
