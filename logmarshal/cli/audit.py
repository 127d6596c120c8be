"""``logmarshal audit``: replay the coordination log and explain every ownership change."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..audit.engine import admin_keys_for_export
from .argtypes import non_empty_path
from .context import CliError, Context, DataSource, declare
from .coord import export_progress
from .group import add_admin_key_option, admin_keys_from
from .output import emit, print_table, shown

__all__ = ["parse_time", "register"]


def parse_time(text: str) -> int:
    """Epoch milliseconds, or ISO 8601 (UTC unless it says otherwise)."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected epoch milliseconds or an ISO 8601 time such as 2026-01-31T03:12:00Z, "
            f"got {text!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


#: the export is read from the cluster, unless --input names one already made
AUDIT = DataSource(
    help=(
        "with --input, that export alone (--bootstrap and --data-dir are then refused); "
        "with --source kafka, __marshal read by Spark from the brokers named by --bootstrap; "
        "otherwise __marshal of the brokers named by --bootstrap HOST:PORT,..., else of the "
        "embedded data directory --data-dir DIR (default: $LOGMARSHAL_DATA_DIR, else ./data), "
        "which must exist"
    ),
    short="--bootstrap or existing --data-dir; --input: no cluster",
)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "audit",
        parents=[common],
        help="replay the coordination log (Spark) and explain every ownership change",
        description=(
            "Export __marshal to Parquet (from --data-dir or --bootstrap, or use an existing "
            "export with --input; or, with --source kafka, let Spark read it from the "
            "--bootstrap brokers), replay it with the consumers' rationalizer on Spark, and "
            "write under --out the tables ownership, failovers, verdicts, violations, "
            "heartbeat_gaps, positions (Parquet), summary.json and report.html."
        ),
    )
    parser.add_argument("--input", metavar="EXPORT", help="an export made by 'coord export'")
    parser.add_argument(
        "--out", type=non_empty_path, required=True, metavar="DIR", help="output directory"
    )
    parser.add_argument(
        "--since", type=parse_time, metavar="T", help="report from log time T (ms or ISO 8601)"
    )
    parser.add_argument(
        "--until", type=parse_time, metavar="T", help="stop the replay after log time T"
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
    parser.add_argument(
        "--source",
        choices=("export", "kafka"),
        default="export",
        help="export (default): copy __marshal to Parquet under OUT/export and audit that; "
        "kafka: Spark reads __marshal from the --bootstrap brokers with its own Kafka source, "
        "up to the log ends when the audit starts (Spark engine; the jars come from the cache "
        "'python -m logmarshal.audit.kafkasource fetch' fills)",
    )
    parser.add_argument(
        "--engine",
        choices=("spark", "local"),
        default="spark",
        help="spark (default), or local: the same replay in this process, for small logs",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="cross-check positions, holders and verdict counts against a plain replay",
    )
    parser.add_argument("--no-report", action="store_true", help="skip report.html")
    add_admin_key_option(parser)
    parser.set_defaults(func=_audit)
    declare(parser, AUDIT)


class _Phases:
    """Progress on stderr: one line per phase with its duration (a counter on a terminal)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self._started = 0.0

    def start(self, what: str) -> None:
        self._started = time.perf_counter()
        if not self.quiet:
            sys.stderr.write(f"{what} ...\n")
            sys.stderr.flush()

    def done(self, what: str) -> float:
        took = time.perf_counter() - self._started
        if not self.quiet:
            sys.stderr.write(f"{what} ({took:.1f} s)\n")
            sys.stderr.flush()
        return took

    def counter(self, label: str) -> Any:
        if not self.tty or self.quiet:
            return None

        def show(done: int, total: int) -> None:
            sys.stderr.write(f"\r{label}: {done:,}/{total:,} records   ")
            if done >= total:
                sys.stderr.write("\n")
            sys.stderr.flush()

        return show


def _config(args: argparse.Namespace, info: Any, keys: Any, groups: set[str] | None = None) -> Any:
    from ..audit.engine import replay_config_for

    return replay_config_for(
        info,
        since_ms=args.since,
        until_ms=args.until,
        admin_keys=admin_keys_for_export(keys, info, groups=groups),
    )


def _on_spark(
    args: argparse.Namespace,
    ctx: Context,
    info: Any,
    out: Path,
    keys: Any,
    phases: _Phases,
    timings: dict[str, float],
) -> tuple[Any, Any]:
    """The Spark engine, on the export's Parquet or (``--source kafka``) on Kafka itself;
    returns the result and the replay's configuration."""
    from ..audit.job import run_spark, spark_session
    from ..audit.kafkasource import KafkaSourceError, fetch_jars, groups_on_kafka, spark_conf
    from ..localkafka.harness import KafkaUnavailable

    conf: dict[str, str] = {}
    kafka = args.source == "kafka"
    if kafka:
        try:
            conf = spark_conf(fetch_jars())
        except KafkaUnavailable as exc:
            raise CliError(f"Spark's Kafka source is unavailable: {exc}") from None
    phases.start(f"starting Spark ({args.master})")
    try:
        spark = spark_session(
            args.master, console_progress=phases.tty and not phases.quiet, conf=conf
        )
    except Exception as exc:  # (pyspark's own errors: a traceback, for a mistyped --master)
        if type(exc).__module__.split(".")[0] != "pyspark":
            raise
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CliError(f"cannot start Spark with --master {args.master}: {reason}") from None
    timings["spark_start"] = phases.done("Spark is up")
    try:
        groups = None
        bootstrap = ctx.bootstrap if kafka else None  # --source kafka refused without it
        if bootstrap is not None and keys is not None and keys.default is not None:
            phases.start("reading the groups of the cut (for the '*' admin key)")
            groups = groups_on_kafka(spark, bootstrap, info)
            phases.done(f"{len(groups)} groups")
        config = _config(args, info, keys, groups)
        phases.start("replaying on Spark" + (" from Kafka" if kafka else ""))
        try:
            result = run_spark(spark, info, out, config, kafka_bootstrap=bootstrap)
        except KafkaSourceError as exc:
            raise CliError(f"the audit refuses __marshal on Kafka: {exc}") from None
    finally:
        spark.stop()
    return result, config


def _audit(args: argparse.Namespace, ctx: Context) -> int:
    from ..audit.deps import MissingDependency, require

    try:  # fail before any work, in one line, if the extra is missing
        require("pyarrow")
        if args.engine == "spark":
            require("pyspark")
        if not args.no_report:
            require("matplotlib")
    except MissingDependency as exc:
        raise CliError(str(exc)) from None
    from ..audit.engine import load_tables, run_inprocess
    from ..audit.export import (
        PARQUET,
        capture_cut,
        check_export_files,
        export_coordination,
        read_export_info,
    )
    from ..audit.outputs import write_outputs
    from ..audit.report import summary_rows
    from ..audit.verify import (
        compare,
        records_from_cluster,
        records_from_export,
        reference_replay,
    )

    _check_sources(args, ctx)
    keys = admin_keys_from(args)  # before any work: a bad key file is one line
    if not args.input:
        ctx.cluster  # noqa: B018 -- a missing directory or an unreachable broker: before --out
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    phases = _Phases(quiet=ctx.as_json)
    timings: dict[str, float] = {}

    if args.source == "kafka":
        phases.start(f"fixing the cut of __marshal on {ctx.bootstrap}")
        info = capture_cut(ctx.cluster, out / "kafka-cut", source=f"kafka {ctx.bootstrap}")
        timings["cut"] = phases.done(f"cut at {info.records:,} records, read from Kafka by Spark")
    elif args.input:
        info = read_export_info(args.input)
        if info.stored != PARQUET:
            raise CliError(
                f"{args.input} is a cut of __marshal on Kafka, which holds no records: audit "
                "it with --source kafka, or export it with 'coord export'"
            )
        check_export_files(info)
    else:
        phases.start("exporting __marshal to Parquet")
        info = export_coordination(ctx.cluster, out / "export", progress=export_progress())
        timings["export"] = phases.done(f"exported {info.records:,} records to {out / 'export'}")
    if args.engine == "spark":
        result, config = _on_spark(args, ctx, info, out, keys, phases, timings)
    else:
        config = _config(args, info, keys)
        phases.start("replaying in this process")
        result = run_inprocess(info, out, config, progress=phases.counter("replayed"))
    timings["audit"] = phases.done(f"replayed {result.records:,} records")
    tables = load_tables(out)
    extra: dict[str, Any] = {"timings_seconds": {k: round(v, 3) for k, v in timings.items()}}
    verified = None
    if args.verify:
        phases.start("cross-checking against a plain replay")
        if args.input:
            source = records_from_export(info)
        else:
            ends = {p.partition: p.latest for p in info.partitions}
            source = records_from_cluster(ctx.cluster, info.topic, ends)
        verified = compare(tables, reference_replay(source, config))
        extra["verify"] = verified.as_dict()
        phases.done("cross-check " + ("passed" if verified.ok else "FAILED"))
    if not args.no_report:
        phases.start("writing summary.json and report.html")
    summary, report = write_outputs(
        out, info, config, result, tables=tables, extra=extra, report=not args.no_report
    )
    if report is not None:
        phases.done(f"wrote {report}")

    if ctx.as_json:
        emit(True, summary)
    else:
        rows = summary_rows(summary)
        print_table(
            rows,
            [
                "group",
                "partitions",
                "held",
                "claims",
                "failovers",
                "stale",
                "restart",
                "released",
                "reset",
                "rebalance",
                "violations",
                "accepted",
                "rejected",
                "lag",
            ],
        )
        gaps = summary["failovers"]["gap_ms"]
        if gaps["count"]:
            print(
                f"failovers: {gaps['count']}, unowned gap p50 {gaps['p50']} ms, "
                f"p95 {gaps['p95']} ms, max {gaps['max']} ms"
            )
        moves = summary.get("moves", {})
        if moves.get("count"):
            causes = ", ".join(
                f"{c} {n}"
                for c, n in sorted(moves["by_cause"].items(), key=lambda x: (-x[1], x[0]))
            )
            print(f"moves: {moves['count']} ({causes})")
            for group, g in sorted(summary["groups"].items()):
                for client, m in sorted(g.get("moves_by_member", {}).items()):
                    took = ", ".join(f"{k} {n}" for k, n in sorted(m["took"].items())) or "-"
                    gave = ", ".join(f"{k} {n}" for k, n in sorted(m["gave_up"].items())) or "-"
                    print(f"  {shown(f'{group}/{client}')}: took {took}; gave up {gave}")
        v = summary["violations"]
        if v["count"]:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(v["by_kind"].items()))
            print(f"violations: {v['count']} ({kinds})")
        print(f"tables, summary.json{'' if args.no_report else ', report.html'} in {out}")
        if verified is not None:
            print("cross-check: " + ("ok" if verified.ok else "FAILED"))
            for line in verified.mismatches[:20]:
                print("  " + line)
    if verified is not None and not verified.ok:
        return 1
    return 0


def _check_sources(args: argparse.Namespace, ctx: Context) -> None:
    """Where the audit reads from and writes to, refused before any work when they clash."""
    if args.input:
        for option, value in (
            ("--bootstrap", ctx.bootstrap),
            ("--data-dir", ctx.explicit_data_dir),
        ):
            if value is not None:
                raise CliError(
                    f"audit refuses {option} with --input: it reads that export "
                    "alone and opens no cluster"
                )
    if args.source == "kafka":
        if args.input:
            raise CliError("--source kafka reads __marshal from Kafka: it takes no --input")
        if args.engine != "spark":
            raise CliError("--source kafka is read by Spark's Kafka source: use --engine spark")
        if ctx.bootstrap is None:
            raise CliError(
                "--source kafka reads __marshal from Apache Kafka: give --bootstrap HOST:PORT"
            )
    if args.since is not None and args.until is not None and args.since > args.until:
        raise CliError("--since is after --until")
    if args.input and _within(Path(args.out), Path(args.input)):
        raise CliError(
            f"--out {args.out} is inside --input {args.input}: the audit's tables would be "
            "written over the export it reads; give another directory"
        )


def _within(path: Path, directory: Path) -> bool:
    """Is ``path`` ``directory`` or under it (symbolic links followed)?"""
    path, directory = path.resolve(), directory.resolve()
    return path == directory or directory in path.parents
