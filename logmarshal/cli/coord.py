"""``logmarshal coord export|dump``: the coordination log as Parquet (for the audit or Spark),
or decoded record by record with the verdict replay gave each."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from typing import Any

from rationalizer import MESSAGE_NAMES, DecodeError, HeartbeatingTask, ReleasingTask
from rationalizer._codec import VERSION_6, envelope

from .argtypes import non_empty_path
from .context import READS, CliError, Context, declare
from .group import add_admin_key_option, admin_keys_from
from .output import emit, print_table

__all__ = ["dump_row", "export_progress", "register"]

_DUMP_COLUMNS = [
    "cp",
    "offset",
    "log_time",
    "type",
    "group",
    "topic",
    "partition",
    "client_id",
    "instance_id",
    "value",
    "verdict",
    "reason",
]


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("coord", help="inspect and export the coordination log")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    export = verbs.add_parser(
        "export",
        parents=[common],
        help="copy __marshal to Parquet (one file per coordination partition)",
        description=(
            "Copy every __marshal record (coordination partition, offset, log time, key, value) "
            "to Parquet under --out, plus export.json (offset ranges, data topics' log ends). "
            "'logmarshal audit --input DIR' and the Spark job read it."
        ),
    )
    export.add_argument(
        "--out", type=non_empty_path, required=True, metavar="DIR", help="export directory"
    )
    export.set_defaults(func=_export)
    declare(export, READS)

    dump = verbs.add_parser(
        "dump",
        parents=[common],
        help="every coordination record decoded, with its verdict",
        description=(
            "Replay all of __marshal and print every record: coordination partition, offset, "
            "log time, message fields, and the verdict the rationalizer gave it (accepted with "
            "its effect, or rejected with its reason). Filters only select what is printed; "
            "the replay always starts at the beginning, so verdicts are the group's. With "
            "--json, one JSON object per line. 'value' is last_offset (heartbeat, release), "
            "proposed_last_offset (claiming_messages), the expiry (release_group) or, for a "
            "task's heartbeat or release, the scalar of its source positions (listed in "
            "'positions')."
        ),
    )
    dump.add_argument("--group", help="only records of this group")
    dump.add_argument(
        "--topic",
        help="only records of this topic, and those that name no one topic and may concern "
        "it (ReleaseGroups, which void all topics; members' announcements and heartbeats)",
    )
    dump.add_argument(
        "--since",
        metavar="TIME",
        help="from log time TIME on (epoch ms or ISO 8601, UTC if no zone)",
    )
    add_admin_key_option(dump)
    dump.set_defaults(func=_dump)
    declare(dump, READS)


def export_progress() -> Any:
    """A progress callback for exports: a live counter on a terminal, nothing otherwise."""
    if not sys.stderr.isatty():
        return None

    def show(cp: int, done: int, total: int) -> None:
        sys.stderr.write(f"\rexporting __marshal/{cp}: {done:,}/{total:,} records   ")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def _export(args: argparse.Namespace, ctx: Context) -> int:
    from ..audit.deps import MissingDependency, require

    try:
        require("pyarrow")
    except MissingDependency as exc:
        raise CliError(str(exc)) from None
    from ..audit.export import export_coordination  # pyarrow only when used

    counter = _SkippedBatches()
    coordlog_log = logging.getLogger("logmarshal._coordlog")
    coordlog_log.addHandler(counter)
    try:
        info = export_coordination(ctx.cluster, args.out, progress=export_progress())
    finally:
        coordlog_log.removeHandler(counter)
    rows = [
        {
            "partition": p.partition,
            "earliest": p.earliest,
            "latest": p.latest,
            "records": p.records,
        }
        for p in info.partitions
    ]
    if ctx.as_json:
        emit(
            True,
            {
                "path": info.path,
                "records": info.records,
                "partitions": rows,
                "skipped_batches": counter.count,
            },
        )
        return 0
    print_table(rows, ["partition", "earliest", "latest", "records"])
    print(f"exported {info.records:,} coordination records to {info.path} in {info.seconds:.2f} s")
    if counter.count:
        print(
            f"note: skipped {counter.count} stored batch(es) that do not decode, whole, as "
            "every replayer does (logged with their offsets)"
        )
    if info.truncated:
        print(
            f"note: history of partitions {info.truncated} starts after retention removed records"
        )
    return 0


class _SkippedBatches(logging.Handler):
    """Counts the damaged batches the coordination log's reader skipped during an export
    (it reports each with its :class:`~storage.CorruptBatch`; the export's own summary
    belongs to the audit package and has no field for them)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "corrupt_batch", None) is not None:
            self.count += 1


def dump_row(rec: Any) -> dict[str, Any]:
    """One record as printed by ``coord dump`` (JSON-ready)."""
    from ..admin.times import format_ms

    msg = rec.message()
    v = rec.verdict
    row: dict[str, Any] = {
        "cp": rec.coord_partition,
        "offset": rec.offset,
        "timestamp_ms": rec.timestamp_ms,
        "log_time": format_ms(rec.log_time_ms),
        "type": "invalid" if msg is None else MESSAGE_NAMES.get(type(msg), type(msg).__name__),
        "group": getattr(msg, "group_id", None),
        "topic": getattr(msg, "topic", None),
        "partition": getattr(msg, "partition", None),
        "client_id": getattr(msg, "client_id", None),
        "instance_id": getattr(msg, "instance_id", None),
        "value": None,
        "heartbeat_interval_ms": getattr(msg, "heartbeat_interval_ms", None),
        "tagged": getattr(msg, "auth_tag", None) is not None,
        "verdict": "-" if v is None else ("accepted" if v.accepted else "rejected"),
        "reason": None,
    }
    for name in ("last_offset", "proposed_last_offset", "msg_expire_time"):
        if hasattr(msg, name):
            row["value"] = getattr(msg, name)
    if isinstance(msg, HeartbeatingTask | ReleasingTask):  # value: the vector's scalar
        row["positions"] = [list(x) for x in msg.positions]
    if v is not None:
        detail = v.effect if v.accepted else v.reason
        row["reason"] = None if detail is None else detail.value
        if v.previous_holder is not None:
            row["previous_holder"] = list(v.previous_holder)
        if v.voided:
            row["voided"] = [list(x) for x in v.voided]
    if msg is None:
        row["key_hex"] = None if rec.key is None else bytes(rec.key[:64]).hex()
        row["value_hex"] = None if rec.value is None else bytes(rec.value[:64]).hex()
        if rec.value is not None and len(rec.value) > 1 and rec.value[0] >= VERSION_6:
            # a record of a version to come: its envelope says which group it halts (a
            # dump --group left out the one record that explains the group's halt)
            with contextlib.suppress(DecodeError):
                version, _type, row["group"], _end = envelope(rec.value)
                row["type"] = f"version_{version}"
    return row


def _dump(args: argparse.Namespace, ctx: Context) -> int:
    from .._coordlog import group_of_record
    from ..admin import read_coordination
    from ..admin.times import parse_datetime_ms

    since = None if args.since is None else parse_datetime_ms(args.since)
    keys = admin_keys_from(args)
    rows: list[dict[str, Any]] = []

    def take(rec: Any) -> None:
        if since is not None and rec.log_time_ms < since:
            return
        if args.group is not None and group_of_record(rec.key, rec.value) != args.group:
            return
        row = dump_row(rec)
        if args.group is not None and row["group"] != args.group:
            return
        if args.topic is not None and row["topic"] not in (args.topic, None):
            return
        if args.topic is not None and row["type"] == "invalid":
            return  # (a record of a version to come is kept: it may concern the topic)
        if ctx.as_json:
            sys.stdout.write(json.dumps(row, sort_keys=True) + "\n")
        else:
            rows.append({k: "-" if v is None else v for k, v in row.items()})

    state = read_coordination(ctx.cluster, admin_keys=keys, on_record=take)
    if not ctx.as_json:
        if state.n == 0:
            print("there is no __marshal topic: no group ever coordinated here", file=sys.stderr)
        print_table(rows, _DUMP_COLUMNS)
    return 0
