"""``logmarshal broker start``: serve a data directory over the Kafka wire protocol."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from storage._datadir import DEFAULT_RETENTION_CHECK_INTERVAL_MS
from storage.broker import BrokerConfig, load_cluster_file, run_broker
from storage.broker.cluster_file import parse_host_port
from storage.broker.server import DEFAULT_MAX_FRAME, ListenError, MetricsPortError

from .._broker_groups import MarshalGroupView
from .argtypes import host_name, non_negative, positive
from .context import CliError, Context, DataSource, declare, describe_json
from .output import emit

__all__ = ["register"]


#: a broker is where --bootstrap points, never a client of one
SERVES = DataSource(
    help=(
        "the data directory this broker serves and owns (locked while it runs): --data-dir "
        "DIR (default: $LOGMARSHAL_DATA_DIR, else ./data), created if missing; --bootstrap "
        "is refused"
    ),
    short="the --data-dir it serves (created); refuses --bootstrap",
    existing=False,
    refuse_bootstrap=(
        "a broker serves its own data directory (give --data-dir DIR); --bootstrap names "
        "brokers for a client to connect to"
    ),
)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("broker", help="run a broker that serves the log to Kafka clients")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    start = verbs.add_parser(
        "start",
        parents=[common],
        help="serve --data-dir over the Kafka protocol until SIGTERM (--bootstrap refused)",
        description=(
            "Serve the data directory to Kafka clients (kcat, confluent-kafka, kafka-python, "
            "logmarshal --bootstrap). Prints 'listening on HOST:PORT' once ready; SIGTERM or "
            "Ctrl-C flushes every partition and exits 0."
        ),
    )
    start.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="address to bind (default: 127.0.0.1:9092, or this broker's line of --cluster-file;"
        " port 0 picks a free port)",
    )
    start.add_argument(
        "--advertise",
        type=host_name,
        metavar="HOST",
        help="host name clients should reconnect to (default: the bound host)",
    )
    start.add_argument(
        "--broker-id",
        type=non_negative,
        default=0,
        help="this broker's id, 0 or more (Kafka's node.id; default: 0)",
    )
    start.add_argument(
        "--cluster-file",
        metavar="FILE",
        help="static cluster: one 'ID HOST:PORT' line per broker; partitions are spread over them",
    )
    start.add_argument(
        "--max-frame-bytes",
        type=positive,
        default=DEFAULT_MAX_FRAME,
        help=f"largest request accepted; bigger ones close the connection (default: {DEFAULT_MAX_FRAME})",
    )
    start.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate (chain)")
    start.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    start.add_argument(
        "--ready-file",
        metavar="FILE",
        help="write HOST:PORT here once listening (for scripts that start the broker)",
    )
    start.add_argument(
        "--no-record-validation",
        dest="validate_records",
        action="store_false",
        help="store producer batches after the batch checks only, without walking each record"
        " (for measuring what validation costs; a corrupt record can then poison a partition)",
    )
    start.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics on http://LISTEN-HOST:PORT/metrics (requests by API and "
        "error, bytes, produce/fetch latency, partition sizes)",
    )
    start.add_argument(
        "--retention-check-interval-ms",
        type=positive,
        default=DEFAULT_RETENTION_CHECK_INTERVAL_MS,
        metavar="MS",
        help="how often segments past retention.ms / retention.bytes are deleted, the active "
        "one included (Kafka's log.retention.check.interval.ms; default: "
        f"{DEFAULT_RETENTION_CHECK_INTERVAL_MS})",
    )
    start.set_defaults(func=_start)
    declare(start, SERVES)
    describe_json(
        start,
        'once listening, one JSON document instead of the line "listening on HOST:PORT": '
        '{"listening": "HOST:PORT", "host": ..., "port": ..., "broker_id": ..., "data_dir": ...}',
    )


def _start(args: argparse.Namespace, ctx: Context) -> int:
    SERVES.admit(ctx.bootstrap, None, "broker start")  # main did; this is for direct callers
    ctx.check_data_dir()
    host, port = "127.0.0.1", 9092
    if args.cluster_file is not None:
        try:
            layout = load_cluster_file(args.cluster_file, args.broker_id)
        except (OSError, ValueError) as exc:
            raise CliError(str(exc)) from None
        host, port = layout.me.host, layout.me.port
    if args.listen is not None:
        try:
            host, port = parse_host_port(args.listen)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise CliError("TLS needs both --tls-cert and --tls-key")
    config = BrokerConfig(
        data_dir=ctx.data_dir,
        host=host,
        port=port,
        broker_id=args.broker_id,
        cluster_file=args.cluster_file,
        advertised_host=args.advertise,
        max_frame_bytes=args.max_frame_bytes,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        ready_file=args.ready_file,
        validate_records=args.validate_records,
        metrics_port=args.metrics_port,
        retention_check_interval_ms=args.retention_check_interval_ms,
        group_view=MarshalGroupView,  # Kafka's tools see Marshal groups (read-only)
    )

    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise CliError(f"--metrics-port {args.metrics_port} is not a port")

    def ready(address: tuple[str, int]) -> None:
        bound = f"{address[0]}:{address[1]}"
        payload = {
            "listening": bound,
            "host": address[0],
            "port": address[1],
            "broker_id": args.broker_id,
            "data_dir": ctx.data_dir,
        }
        emit(ctx.as_json, payload, f"listening on {bound}")
        sys.stdout.flush()  # a parent process waits for this line

    try:
        status = run_broker(config, on_ready=ready)
    except MetricsPortError as exc:
        raise CliError(f"cannot start the broker: {exc}") from None
    except ListenError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    except OSError as exc:  # the data directory's (a full disk, permissions)
        where = exc.filename if exc.filename is not None else ctx.data_dir
        raise CliError(f"cannot start the broker: {where}: {exc.strerror or exc}") from None
    print("broker stopped", file=sys.stderr)
    return status
