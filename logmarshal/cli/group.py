"""``logmarshal group list|describe|reset|pause``: see and move consumer groups.

The options of ``reset`` are those of ``kafka-consumer-groups --reset-offsets``; unlike
Kafka, a *live* group can be moved (ReleaseGroup pauses it through the log alone). Every
value is parsed here rather than by argparse so that every mistake is one line and exit 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .._coordlog import COORDINATION_TOPIC
from ..admin import (
    AdminKeys,
    Target,
    describe_group,
    execute,
    list_groups,
    load_admin_keys,
    new_admin,
    parse_plan_csv,
    plan_from_log,
    plan_to_csv,
    read_coordination,
    wake_halted,
)
from ..admin.describe import PartitionView, require_group
from ..admin.reset import parse_topic_scope, resolve_scope
from ..admin.times import (
    format_ms,
    parse_datetime_ms,
    parse_duration_ms,
    parse_span_ms,
    parse_whole,
)
from .argtypes import seconds_or_zero
from .context import READS, CliError, Context, DataSource, declare
from .output import emit, print_table, shown

__all__ = ["add_admin_key_option", "admin_keys_from", "register"]

_MIRROR_NEEDS_BOOTSTRAP = (
    "mirror-offsets writes Kafka committed offsets: use --bootstrap (an embedded data "
    "directory has no Kafka groups to mirror into)"
)

_TARGETS = (
    ("to_earliest", "--to-earliest"),
    ("to_latest", "--to-latest"),
    ("to_current", "--to-current"),
    ("to_offset", "--to-offset"),
    ("shift_by", "--shift-by"),
    ("to_datetime", "--to-datetime"),
    ("by_duration", "--by-duration"),
    ("from_file", "--from-file"),
)

#: mirror-offsets writes into Kafka's own group offsets, which only brokers have
MIRROR = DataSource(
    help="the brokers named by --bootstrap HOST:PORT,... (required: Apache Kafka)",
    short="--bootstrap only; refuses --data-dir",
    refuse_data_dir=_MIRROR_NEEDS_BOOTSTRAP,
)

#: what a dry run of --to-current / --shift-by says about its figures
RELATIVE_NOTE = (
    "note: these positions are as of now; --execute computes them again from the group's "
    "position and the log end once its pause has landed (what members consume until then is "
    "not rewound)"
)


def add_admin_key_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--admin-key-file",
        metavar="FILE",
        help=(
            "admin keys (lines 'GROUP KEY', key in hex or base64, '*' for every group; the "
            "file must not be readable by others): tag admin records and reject untagged ones"
        ),
    )


def admin_keys_from(args: argparse.Namespace) -> AdminKeys | None:
    path = getattr(args, "admin_key_file", None)
    return None if path is None else load_admin_keys(path)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "group", help="list, describe, reset and pause consumer groups (from __marshal)"
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for add in (
        _register_list,
        _register_describe,
        _register_reset,
        _register_pause,
        _register_mirror,
    ):
        add(verbs, common)


def _register_list(verbs: Any, common: argparse.ArgumentParser) -> None:
    listing = verbs.add_parser(
        "list",
        parents=[common],
        help="groups seen in __marshal",
        description="Groups seen in __marshal: members (live announced members, plus fresh "
        "holders that never announced), partitions owned "
        "(held by a holder that is not stale) and known, and whether the group is paused.",
    )
    add_admin_key_option(listing)
    listing.set_defaults(func=_list)
    declare(listing, READS)


def _register_describe(verbs: Any, common: argparse.ArgumentParser) -> None:
    describe = verbs.add_parser(
        "describe",
        parents=[common],
        help="holders, positions, lag and status per partition",
        description=(
            "Per member (announced members and holders that never announced): instance, "
            "since / last seen, weight, subscribed topics, its target partitions (the "
            "balanced assignment every member computes) and the partitions it holds; whether "
            "the group is balanced (every partition held by its target owner). "
            "Per partition: holder, freshness and heartbeat age (or, unheld, 'fenced until T': "
            "a removed holder's lease the log keeps, protocol version 5), last offset, position (next "
            "offset to consume), log end, lag, and a Burrow-style status over its last 10 "
            "position records: OK; WARN (lag never decreases); STALL (position never moves "
            "while lag > 0); STOP (no position record for 2 heartbeat intervals while lag > 0); "
            "REWIND (the position went backwards); PAST_END (the position is past the log end, "
            "lag below 0: the log was cut back or made again). The group's status is its worst "
            "partition's."
        ),
    )
    describe.add_argument("group")
    add_admin_key_option(describe)
    describe.set_defaults(func=_describe)
    declare(describe, READS)


def _register_reset(verbs: Any, common: argparse.ArgumentParser) -> None:
    reset = verbs.add_parser(
        "reset",
        parents=[common],
        help="move a group's positions, even while it consumes",
        description=(
            "Plan new positions like kafka-consumer-groups --reset-offsets and, with "
            "--execute, apply them to a live group: ReleaseGroup pauses it on every "
            "coordination partition, the admin's heartbeats set the positions, replay confirms "
            "both, and after the pause the members claim again and resume exactly there. "
            "Relative targets (--to-current, --shift-by) are computed from the group's "
            "position once the pause has landed, when no member can move it any more, and "
            "every target from the log ends of then (--to-latest, a time past the last record, "
            "a clamp): what a live member reserved and consumed meanwhile is never rewound, so "
            "a dry run's figures for them are as of now. Targets outside the log are clamped, "
            "with a warning. Another admin's pause landing meanwhile stops the reset before it "
            "writes any position. Without --execute nothing is written."
        ),
    )
    reset.add_argument("group")
    reset.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC[:P,...]",
        help="a topic, or some of its partitions (repeatable)",
    )
    reset.add_argument(
        "--all-topics", action="store_true", help="every topic the group has positions for"
    )
    reset.add_argument("--to-earliest", action="store_true", help="the earliest offset")
    reset.add_argument(
        "--to-latest",
        action="store_true",
        help="the log end, as of the moment the pause has landed",
    )
    reset.add_argument(
        "--to-current",
        action="store_true",
        help="the current position, as of the moment the pause has landed",
    )
    reset.add_argument("--to-offset", metavar="N", help="offset N")
    reset.add_argument(
        "--shift-by",
        metavar="±N",
        help="the current position (as of the moment the pause has landed) plus N",
    )
    reset.add_argument(
        "--to-datetime",
        metavar="TIME",
        help="the first offset stamped at or after TIME (ISO 8601, e.g. "
        "2026-11-21T10:00:00.000; a time without a zone is UTC; digits alone are epoch "
        "milliseconds, so write a date with its dashes)",
    )
    reset.add_argument(
        "--by-duration",
        metavar="PnDTnHnMnS",
        help="the first offset stamped at or after now minus this ISO 8601 duration",
    )
    reset.add_argument(
        "--from-file", metavar="CSV", help="rows topic,partition,offset (as --export writes)"
    )
    reset.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (the default); relative targets' figures are as of now",
    )
    reset.add_argument("--execute", action="store_true", help="apply the plan")
    reset.add_argument(
        "--export",
        action="store_true",
        help="print the plan as CSV (what --from-file reads); not with --json, which prints "
        "it as JSON",
    )
    reset.add_argument(
        "--pause-for",
        metavar="DURATION",
        help="how long the group stays paused (30s, 5m, PT1M; default max(2·HB + 1 s, 5 s), "
        "never less than 2·HB of its members)",
    )
    reset.add_argument("--client-id", help="the admin's client id (default admin@HOST)")
    add_admin_key_option(reset)
    reset.set_defaults(func=_reset)
    declare(reset, READS)


def _register_pause(verbs: Any, common: argparse.ArgumentParser) -> None:
    pause = verbs.add_parser(
        "pause",
        parents=[common],
        help="void every claim of a group and pause it for a while",
        description="Write ReleaseGroup to every coordination partition: members drop their "
        "claims and claim again, at unchanged positions, once the pause is over. A later "
        "pause replaces the window of an earlier one: to end a pause early, pause the group "
        "again for the shortest time it takes (2·HB of its members).",
    )
    pause.add_argument("group")
    pause.add_argument(
        "--for",
        dest="duration",
        required=True,
        metavar="DURATION",
        help="30s, 5m, 1h30m or ISO 8601 (PT30S); at least 2·HB of the group's members",
    )
    pause.add_argument("--client-id", help="the admin's client id (default admin@HOST)")
    add_admin_key_option(pause)
    pause.set_defaults(func=_pause)
    declare(pause, READS)


def _register_mirror(verbs: Any, common: argparse.ArgumentParser) -> None:
    mirror = verbs.add_parser(
        "mirror-offsets",
        parents=[common],
        help="copy a group's positions into Kafka's committed offsets (Apache Kafka)",
        description=(
            "Replay __marshal and commit each partition's position (the next offset to consume) "
            "as the Kafka committed offset of a group of the same name, so kafka-consumer-groups, "
            "Burrow and admin clients show the lag. Read-only for logmarshal: the committed "
            "offsets are never read back; __marshal stays the source of truth. Needs "
            "--bootstrap. logmarshal's own broker needs no mirror (it serves the positions "
            "itself) and refuses the commit."
        ),
    )
    mirror.add_argument("group")
    mirror.add_argument(
        "--kafka-group", metavar="NAME", help="commit under this Kafka group id (default: GROUP)"
    )
    mirror.add_argument(
        "--interval",
        type=seconds_or_zero,
        default=0.0,
        metavar="SECONDS",
        help="keep mirroring, every SECONDS (default: once, then exit)",
    )
    add_admin_key_option(mirror)
    mirror.set_defaults(func=_mirror)
    declare(mirror, MIRROR)


def _now_ms() -> int:
    return round(time.time() * 1000)


def _warn(lines: Any) -> None:
    for line in lines:
        print(f"warning: {line}", file=sys.stderr)


def _list(args: argparse.Namespace, ctx: Context) -> int:
    state = read_coordination(ctx.cluster, admin_keys=admin_keys_from(args))
    _warn(state.gap_warnings())  # (a group halted by a gap showed as OK, said nothing)
    now = _now_ms()
    groups = list_groups(state, now)
    rows = [
        {
            "group": g.group,
            "members": len(g.members),
            "owned": g.owned,
            "known": g.known,
            "paused": "until " + format_ms(g.paused_until_ms) if g.paused else "no",
            "halted": "no"
            if g.halted is None
            else "v{2}@{0}/{1}".format(*g.halted),  # version@cp/offset
        }
        for g in groups
    ]
    if ctx.as_json:
        emit(
            True,
            [
                {
                    "group": g.group,
                    "members": [list(m) for m in g.members],
                    "owned": g.owned,
                    "known": g.known,
                    "paused": g.paused,
                    "paused_until_ms": g.paused_until_ms if g.paused else None,
                    # a record of a version to come halted it (PROTOCOL.md "Version 6")
                    "halted": None
                    if g.halted is None
                    else dict(zip(("coord_partition", "offset", "version"), g.halted, strict=True)),
                }
                for g in groups
            ],
        )
    else:
        print_table(rows, ["group", "members", "owned", "known", "paused", "halted"])
    return 0


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _last_offset_text(p: Any) -> str:
    """``20 (positions a:12,b:7)`` for a task key with a position vector (its scalar, then
    each source's last_offset), else the last offset or ``-``."""
    if p.positions is None:
        return _dash(p.last_offset)
    sources = ",".join(f"{topic}:{offset}" for topic, offset in p.positions)
    return f"{p.last_offset} (positions {sources})"


def _units_text(units: Any) -> str:
    """``events/0,1,2 other/*``: units grouped by topic (``*``: the whole topic)."""
    by_topic: dict[str, list[str]] = {}
    for topic, partition in sorted(units):
        by_topic.setdefault(topic, []).append("*" if partition < 0 else str(partition))
    return " ".join(f"{t}/{','.join(ps)}" for t, ps in by_topic.items()) or "-"


def _age(now_ms: int, ms: int | None) -> str:
    return "-" if ms is None else f"{(now_ms - ms) / 1000:.1f}s ago"


def _balanced_text(d: Any) -> str:
    if d.balanced is None:
        return "n/a (no announced member has a share yet)"
    if d.balanced:
        return "yes"
    n = len(d.to_move)
    return f"no ({n} partition{'' if n == 1 else 's'} to move)"


def _member_row(m: Any, now_ms: int) -> dict[str, Any]:
    if not m.announced:
        return {
            "member": m.client_id,
            "instance": m.instance_id,
            "since": "-",
            "last_seen": "-",
            "weight": "-",
            "topics": "(not announced)",
            "target": "-",
            "current": _units_text(m.current),
        }
    return {
        "member": m.client_id,
        "instance": m.instance_id,
        "since": _age(now_ms, m.since_ms),
        "last_seen": _age(now_ms, m.last_seen_ms),
        "weight": m.weight,
        "topics": " ".join(f"{t}({n})" for t, n in m.topics) or "-",
        "target": _units_text(m.target) + ("" if m.counted else " (settling)"),
        "current": _units_text(m.current),
    }


def _unit_json(unit: Any) -> dict[str, Any]:
    topic, partition = unit
    return {"topic": topic, "partition": None if partition < 0 else partition}


def _member_json(m: Any, now_ms: int) -> dict[str, Any]:
    return {
        "client_id": m.client_id,
        "instance_id": m.instance_id,
        "announced": m.announced,
        "since_ms": m.since_ms,
        "last_seen_ms": m.last_seen_ms,
        "age_ms": None if m.since_ms is None else now_ms - m.since_ms,
        "last_seen_age_ms": None if m.last_seen_ms is None else now_ms - m.last_seen_ms,
        "heartbeat_interval_ms": m.heartbeat_interval_ms,
        "weight": m.weight,
        "max_claims": m.max_claims,
        "entire_topic": m.entire_topic,
        "topics": [{"topic": t, "partitions": n} for t, n in m.topics],
        "counted": m.counted,
        "target": [_unit_json(u) for u in m.target],
        "current": [_unit_json(u) for u in m.current],
    }


def _describe(args: argparse.Namespace, ctx: Context) -> int:
    state = read_coordination(ctx.cluster, admin_keys=admin_keys_from(args))
    _warn(state.gap_warnings())
    d = describe_group(ctx.cluster, state, args.group, _now_ms())
    if ctx.as_json:
        emit(
            True,
            {
                "group": d.group,
                "status": d.status.value,
                "paused": d.paused,
                "paused_until_ms": d.paused_until_ms if d.paused else None,
                "pause_admin": list(d.pause_admin) if d.paused and d.pause_admin else None,
                "members": [_member_json(m, d.now_ms) for m in d.member_views],
                "balanced": d.balanced,
                "to_move": [_unit_json(u) for u in d.to_move],
                "now_ms": d.now_ms,
                "partitions": [
                    {
                        "topic": p.topic,
                        "partition": p.partition,
                        "coord_partition": p.coord_partition,
                        "client_id": p.client_id,
                        "instance_id": p.instance_id,
                        "freshness": p.freshness,
                        "heartbeat_age_ms": p.heartbeat_age_ms,
                        "heartbeat_interval_ms": p.lease_ms,
                        "last_offset": p.last_offset,
                        "positions": None
                        if p.positions is None
                        else {topic: offset for topic, offset in p.positions},
                        "position": p.position,
                        "earliest": p.earliest,
                        "log_end": p.log_end,
                        "lag": p.lag,
                        "status": None if p.status is None else p.status.value,
                        "fenced_until_ms": p.fenced_until_ms,
                    }
                    for p in d.partitions
                ],
            },
        )
        return 0
    paused = f"paused until {format_ms(d.paused_until_ms)}" if d.paused else "not paused"
    if d.paused and d.pause_admin:
        paused += f" by {shown(d.pause_admin[0])}/{shown(d.pause_admin[1])}"  # (the log's)
    print(
        f"group {shown(d.group)}: status {d.status.value}, {len(d.members)} member(s), {paused}, "
        f"balanced: {_balanced_text(d)}"
    )
    if d.member_views:
        print_table(
            [_member_row(m, d.now_ms) for m in d.member_views],
            ["member", "instance", "since", "last_seen", "weight", "topics", "target", "current"],
        )
        print()
    rows = [
        {
            "topic": p.topic,
            "partition": p.partition,
            "client_id": _dash(p.client_id),
            "instance_id": _dash(p.instance_id),
            "fresh": _fresh_text(p),
            "hb_age_ms": _dash(p.heartbeat_age_ms),
            "last_offset": _last_offset_text(p),
            "position": _dash(p.position),
            "log_end": _dash(p.log_end),
            "lag": _dash(p.lag),
            "status": "-" if p.status is None else p.status.value,
        }
        for p in d.partitions
    ]
    print_table(
        rows,
        [
            "topic",
            "partition",
            "client_id",
            "instance_id",
            "fresh",
            "hb_age_ms",
            "last_offset",
            "position",
            "log_end",
            "lag",
            "status",
        ],
    )
    return 0


def _fresh_text(p: PartitionView) -> str:
    """The holder's freshness; for a partition nobody holds while a lease the log took away
    early still runs (protocol version 5), ``fenced until <time>``: nobody can claim it
    before then, which is why it stays unheld."""
    if p.freshness is None and p.fenced_until_ms is not None:
        return f"fenced until {format_ms(p.fenced_until_ms)}"
    return _dash(p.freshness)


def _target(args: argparse.Namespace, group: str) -> Target:
    given = [flag for name, flag in _TARGETS if getattr(args, name) not in (None, False)]
    if not given:
        raise CliError("no target: give one of " + ", ".join(flag for _, flag in _TARGETS))
    if len(given) > 1:
        raise CliError(f"give exactly one target, not {' and '.join(given)}")
    if args.to_earliest:
        return Target("earliest")
    if args.to_latest:
        return Target("latest")
    if args.to_current:
        return Target("current")
    if args.to_offset is not None:
        try:
            value = parse_whole(args.to_offset)
        except ValueError:
            raise CliError(
                f"--to-offset: expected a whole number, got {args.to_offset!r}"
            ) from None
        if value < 0:
            raise CliError(f"--to-offset: offsets are never negative, got {value}")
        return Target("offset", value)
    if args.shift_by is not None:
        try:
            return Target("shift", parse_whole(args.shift_by))
        except ValueError:
            raise CliError(f"--shift-by: expected a whole number, got {args.shift_by!r}") from None
    if args.to_datetime is not None:
        return Target("datetime", parse_datetime_ms(args.to_datetime))
    if args.by_duration is not None:
        return Target("datetime", _now_ms() - parse_duration_ms(args.by_duration))
    try:
        with open(args.from_file, encoding="utf-8-sig") as f:  # (a BOM: Excel's CSV)
            text = f.read()
    except OSError as exc:
        raise CliError(f"cannot read {args.from_file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"{args.from_file} is not UTF-8 text") from None
    return Target("file", parse_plan_csv(text, group, args.from_file))


def _reset(args: argparse.Namespace, ctx: Context) -> int:
    if args.dry_run and args.execute:
        raise CliError("give either --dry-run or --execute, not both")
    if args.export and ctx.as_json:
        raise CliError("give either --export (the plan as CSV) or --json, not both")
    scopes = [parse_topic_scope(t) for t in args.topic]
    pause_ms = None if args.pause_for is None else parse_span_ms(args.pause_for)
    target = _target(args, args.group)
    keys = admin_keys_from(args)
    cluster = ctx.cluster
    state = read_coordination(cluster, admin_keys=keys)
    require_group(state, args.group)
    if target.kind == "file":
        assert isinstance(target.value, dict)
        rows = target.value
        file_scope = sorted({(t, None) for t, _ in rows})
        known = set(resolve_scope(cluster, state, args.group, file_scope, False))
        in_scope = known
        if scopes or args.all_topics:
            in_scope = set(resolve_scope(cluster, state, args.group, scopes, args.all_topics))
        for t, p in rows:
            if (t, p) not in known:
                raise CliError(f"{args.from_file}: topic {t!r} has no partition {p}")
        chosen = {k: v for k, v in rows.items() if k in in_scope}
        if not chosen:
            raise CliError(f"{args.from_file}: no row is within the given --topic scope")
        target = Target("file", chosen)
        partitions = sorted(chosen)
    else:
        partitions = resolve_scope(cluster, state, args.group, scopes, args.all_topics)
    plan = plan_from_log(cluster, state, args.group, partitions, target)
    if not args.execute:
        _warn(plan.warnings)
        if args.export:
            sys.stdout.write(plan_to_csv(plan))
        elif ctx.as_json:
            emit(True, _plan_payload(plan, executed=False))
        else:
            print_table(
                [
                    {
                        "group": plan.group,
                        "topic": r.topic,
                        "partition": r.partition,
                        "current_offset": _dash(r.current),
                        "new_offset": r.new,
                    }
                    for r in plan.rows
                ],
                ["group", "topic", "partition", "current_offset", "new_offset"],
            )
            print("dry run: nothing was written (use --execute to apply)", file=sys.stderr)
        if plan.relative:
            print(RELATIVE_NOTE, file=sys.stderr)
        return 0
    admin = new_admin(args.client_id)
    result = execute(cluster, state, plan, admin=admin, pause_ms=pause_ms, admin_keys=keys)
    _warn(result.warnings)
    if result.ok and state.gaps and result.rows:
        print(
            f"waiting for the pause to end at {format_ms(result.pause_until_ms)}: members "
            "halted by the gap take up the partitions once a record lands after it",
            file=sys.stderr,
        )
        woken = wake_halted(cluster, state, result, admin_keys=keys)
        if woken:
            cps = ", ".join(f"{COORDINATION_TOPIC}/{cp}" for cp in woken)
            print(f"wrote a record after the pause to {cps}", file=sys.stderr)
    return _report_execution(ctx, result, export=args.export)


def _plan_payload(plan: Any, executed: bool) -> dict[str, Any]:
    return {
        "group": plan.group,
        "executed": executed,
        # True: the figures are as of now; --execute recomputes them once the pause landed
        "recomputed_when_paused": plan.relative,
        "warnings": list(plan.warnings),
        "partitions": [
            {"topic": r.topic, "partition": r.partition, "current": r.current, "new": r.new}
            for r in plan.rows
        ],
    }


def _report_execution(ctx: Context, result: Any, export: bool = False) -> int:
    rejected = result.rejected
    for w in rejected:
        where = "" if w.topic is None else f" (position of {w.topic}/{w.partition})"
        late = (
            "; it landed after the pause had ended"
            if w.kind == "position" and w.log_append_time >= result.pause_until_ms
            else ""
        )
        print(
            f"logmarshal: error: {w.kind} record at __marshal/{w.coord_partition} offset "
            f"{w.offset}{where} was {w.describe_verdict()}{late}",
            file=sys.stderr,
        )
    positions = [w for w in result.written if w.kind == "position"]
    if rejected and any(w.ok for w in positions):
        set_ = ", ".join(f"{w.topic}/{w.partition}" for w in positions if w.ok)
        print(
            f"logmarshal: error: the reset is partly applied: {set_} moved, the partitions "
            "above did not; finish it with absolute targets for those alone (--to-offset, or "
            "--from-file with their rows): a relative target run again (--shift-by) would "
            "move the others twice",
            file=sys.stderr,
        )
    if result.planned and not result.rows:
        print(
            "logmarshal: error: the pause did not land on every coordination partition, so no "
            "position was written (the group's positions are unchanged)",
            file=sys.stderr,
        )
    if ctx.as_json:
        emit(
            True,
            {
                "group": result.group,
                "executed": True,
                "ok": result.ok,
                "admin": [result.admin.client_id, result.admin.instance_id],
                "paused_until_ms": result.pause_until_ms,
                "pause_ms": result.pause_ms,
                "partitions": [
                    {"topic": r.topic, "partition": r.partition, "old": r.current, "new": r.new}
                    for r in result.rows
                ],
                "planned": [
                    {"topic": r.topic, "partition": r.partition, "old": r.current, "new": r.new}
                    for r in result.planned
                ],
                "records": [
                    {
                        "kind": w.kind,
                        "coord_partition": w.coord_partition,
                        "offset": w.offset,
                        "topic": w.topic,
                        "partition": w.partition,
                        "verdict": w.describe_verdict(),
                    }
                    for w in result.written
                ],
            },
        )
    elif export:
        from ..admin import Plan

        sys.stdout.write(plan_to_csv(Plan(result.group, result.rows)))
    else:
        planned = {(r.topic, r.partition): r for r in result.planned}
        for r in result.rows:
            was = planned.get((r.topic, r.partition))
            moved = (
                ""
                if was is None or (was.current, was.new) == (r.current, r.new)
                else f" (planned {_dash(was.current)} -> {was.new}; the group moved before the "
                "pause landed)"
            )
            print(f"{r.topic}/{r.partition}: {_dash(r.current)} -> {r.new}{moved}")
        print(
            f"group {result.group} paused until {format_ms(result.pause_until_ms)} by "
            f"{result.admin.client_id}/{result.admin.instance_id}; "
            + (
                f"{len(result.rows)} position(s) set, confirmed by replay"
                if result.ok
                else "NOT confirmed (see errors above)"
            )
        )
    return 0 if result.ok else 1


def _pause(args: argparse.Namespace, ctx: Context) -> int:
    from ..admin import Plan

    pause_ms = parse_span_ms(args.duration)
    keys = admin_keys_from(args)
    state = read_coordination(ctx.cluster, admin_keys=keys)
    require_group(state, args.group)
    admin = new_admin(args.client_id)
    result = execute(
        ctx.cluster, state, Plan(args.group, ()), admin=admin, pause_ms=pause_ms, admin_keys=keys
    )
    return _report_execution(ctx, result)


def _mirror(args: argparse.Namespace, ctx: Context) -> int:
    from ..admin.mirror import KafkaOffsetSink

    if ctx.bootstrap is None:
        raise CliError(_MIRROR_NEEDS_BOOTSTRAP)
    target = args.kafka_group or args.group
    cluster = ctx.cluster  # checks the brokers answer before a client is built for them
    sink = KafkaOffsetSink(ctx.bootstrap)
    try:
        return _mirror_loop(args, ctx, cluster, sink, target)
    finally:
        sink.close()


def _mirror_loop(
    args: argparse.Namespace, ctx: Context, cluster: Any, sink: Any, target: str
) -> int:
    from ..admin.mirror import MirrorError, changed_positions, positions

    keys = admin_keys_from(args)
    mirrored: dict[tuple[str, int], int] = {}
    while True:
        state = read_coordination(cluster, admin_keys=keys)
        changed = changed_positions(positions(state, args.group), mirrored)
        if changed:
            try:
                sink.commit(target, changed)
            except MirrorError as exc:
                raise CliError(str(exc)) from None
            mirrored.update(changed)
        emit(
            ctx.as_json,
            {
                "group": args.group,
                "kafka_group": target,
                "committed": len(changed),
                "partitions": len(mirrored),
            },
            f"{target}: committed {len(changed)} position(s), "
            f"{len(mirrored)} partition(s) mirrored",
        )
        sys.stdout.flush()
        if args.interval == 0:
            return 0
        time.sleep(args.interval)
