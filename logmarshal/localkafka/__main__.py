"""``python -m logmarshal.localkafka fetch|start``: the jars into the cache, or a local Apache
Kafka in the foreground (Ctrl-C stops it) to point logmarshal at with ``--bootstrap``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import tempfile
import threading
from pathlib import Path

from logmarshal.localkafka.harness import KafkaCluster, KafkaStartError, KafkaUnavailable, fetch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m logmarshal.localkafka",
        description="Apache Kafka on this machine, from Maven Central's jars (needs java, mvn).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="fetch the pinned Kafka jars into the cache and print where")
    start = sub.add_parser("start", help="run a KRaft cluster on 127.0.0.1 until Ctrl-C")
    start.add_argument("--nodes", type=int, default=1, help="combined broker+controller nodes")
    start.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    start.add_argument("--ready-file", type=Path, help="write the bootstrap here once ready")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.command == "fetch":
            print(fetch(quiet=False))
            return 0
        workdir = args.dir or Path(tempfile.mkdtemp(prefix="localkafka-"))
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with KafkaCluster(workdir, nodes=args.nodes) as cluster:
            print(f"kafka {cluster.bootstrap} (data in {workdir}); Ctrl-C stops it", flush=True)
            if args.ready_file:
                args.ready_file.write_text(cluster.bootstrap + "\n")
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait()
        return 0
    except (KafkaUnavailable, KafkaStartError) as exc:
        print(f"localkafka: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
