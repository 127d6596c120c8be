"""``logmarshal topic create|list|describe|delete|add-partitions|alter|adopt``."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any, TypeVar

import attrs

from storage import DataDir, TopicConfig

from .._coordlog import (
    COORDINATION_TOPIC,
    SNAPSHOT_TOPIC,
    coordination_topic_config,
    coordination_topic_problems,
    coordination_topic_settings,
    snapshot_topic_config,
)
from .argtypes import config_pair, positive
from .context import CREATES, FILES, READS, CliError, Context, declare
from .output import emit, print_table

__all__ = ["register"]

_V = TypeVar("_V")

#: logmarshal's internal topics: every group's coordination state (claims, positions,
#: pauses, members) and its published snapshots
_COORDINATION_TOPICS = (COORDINATION_TOPIC, SNAPSHOT_TOPIC)
_INTERNAL = " and ".join(_COORDINATION_TOPICS)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("topic", help="create, list, describe and delete topics")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    create = verbs.add_parser(
        "create",
        parents=[common],
        help="create a topic",
        description=(
            "Create a topic. Configs use Kafka's names: segment.bytes, segment.ms, "
            "retention.ms, retention.bytes, flush.messages, flush.ms, "
            "message.timestamp.type (CreateTime|LogAppendTime), max.message.bytes."
        ),
    )
    create.add_argument("name")
    create.add_argument("--partitions", "-p", type=positive, default=1, help="default: 1")
    create.add_argument(
        "--config",
        "-c",
        type=config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a topic config (repeatable)",
    )
    create.set_defaults(func=_create)
    declare(create, CREATES)

    listing = verbs.add_parser("list", parents=[common], help="list topics")
    listing.set_defaults(func=_list)
    declare(listing, READS)

    describe = verbs.add_parser(
        "describe", parents=[common], help="partitions, offsets and config of a topic"
    )
    describe.add_argument("name")
    describe.set_defaults(func=_describe)
    declare(describe, READS)

    delete = verbs.add_parser("delete", parents=[common], help="delete a topic and its data")
    delete.add_argument("name")
    delete.add_argument(
        "--force",
        action="store_true",
        help=f"delete {_INTERNAL} too (refused without it): every group's positions, claims "
        "and pauses are lost with __marshal (groups start over by auto_offset_reset), and "
        "those a truncated __marshal no longer holds with __marshal_snapshots",
    )
    delete.set_defaults(func=_delete)
    declare(delete, READS)

    grow = verbs.add_parser(
        "add-partitions",
        parents=[common],
        help="raise a topic's partition count (it never shrinks)",
    )
    grow.add_argument("name")
    grow.add_argument("--total", type=positive, required=True, help="the new partition count")
    grow.add_argument(
        "--force",
        action="store_true",
        help=f"grow {_INTERNAL} too (refused without it): a group's members that read "
        "different partition counts of __marshal coordinate in different partitions",
    )
    grow.set_defaults(func=_add_partitions)
    declare(grow, READS)

    alter = verbs.add_parser(
        "alter",
        parents=[common],
        help="change a topic's configs (retention, segments, flush, cleanup, ...)",
        description=(
            "Set Kafka-named topic configs with --set NAME=VALUE and reset them to the default "
            "with --delete NAME; durable when the command returns. Unknown names and bad values "
            "are refused (INVALID_CONFIG) and nothing changes, as is a name given twice. Internal "
            f"topics (__marshal) keep their message.timestamp.type; {_INTERNAL} are altered "
            "only with --force."
        ),
    )
    alter.add_argument("name")
    alter.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="repeatable"
    )
    alter.add_argument("--delete", action="append", default=[], metavar="NAME", help="repeatable")
    alter.add_argument(
        "--force",
        action="store_true",
        help=f"alter {_INTERNAL} too (refused without it): a retention or cleanup.policy "
        "that removes their records loses every group's positions, claims and pauses",
    )
    alter.set_defaults(func=_alter)
    declare(alter, READS)

    adopt = verbs.add_parser(
        "adopt",
        parents=[common],
        help="put back a topic whose partition directories lost their metadata (topics.json)",
        description=(
            "Put back in the metadata a topic whose partition directories NAME-0, NAME-1, ... "
            "are in the data directory but not in topics.json (lost, or moved aside because it "
            "was damaged), with every record they hold. Its configs were in the lost file: "
            "give them again with --config (the defaults otherwise; __marshal and "
            "__marshal_snapshots get the ones logmarshal makes them with). Opening a data "
            "directory without its metadata removes empty partition directories, so give "
            "--partitions N if the topic had more than its highest partition holding records."
        ),
    )
    adopt.add_argument("name")
    adopt.add_argument(
        "--partitions",
        "-p",
        type=positive,
        help="the partition count it had (default: up to the highest directory found)",
    )
    adopt.add_argument(
        "--config",
        "-c",
        type=config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a topic config it had (repeatable)",
    )
    adopt.set_defaults(func=_adopt)
    declare(adopt, FILES)


def _adopt(args: argparse.Namespace, ctx: Context) -> int:
    """On the directory's files (a DataDir of its own: the cluster a command opens would
    lock them too)."""
    given = _named_once(args.config)
    if given:
        config = TopicConfig.from_dict(given)
    elif args.name == COORDINATION_TOPIC:
        config = coordination_topic_config()
    elif args.name == SNAPSHOT_TOPIC:
        config = snapshot_topic_config()
    else:
        config = TopicConfig()
    ctx.check_data_dir()
    with DataDir(ctx.data_dir) as data:
        data.adopt_topic(args.name, config, args.partitions)
    adopted = ctx.cluster.describe_topic(args.name)  # (opened once the DataDir let go)
    emit(
        ctx.as_json,
        _description_payload(adopted),
        f"adopted topic {adopted.name!r} with {adopted.partitions} partition(s)",
    )
    return 0


def _description_payload(description: Any) -> dict[str, Any]:
    return {
        "name": description.name,
        "partitions": description.partitions,
        "config": dict(description.config),
        "offsets": [attrs.asdict(o) for o in description.offsets],
    }


def _create(args: argparse.Namespace, ctx: Context) -> int:
    config = _named_once(args.config)
    if args.name in _COORDINATION_TOPICS:
        # made as a Marshaler makes it (a CreateTime __marshal, the default, was refused by
        # every Marshaler, and its timestamp type cannot be altered on a __ topic)
        if args.name == COORDINATION_TOPIC:
            base = coordination_topic_settings()
        else:
            defaults = TopicConfig().to_dict()
            made = snapshot_topic_config().to_dict()
            base = {k: v for k, v in made.items() if defaults.get(k) != v}
        config = {**base, **config}
        coordination = args.name == COORDINATION_TOPIC
        problems = coordination_topic_problems(config) if coordination else []
        if problems:
            raise CliError(
                f"refusing to create {args.name} with {'; '.join(problems)}: no Marshaler "
                "would coordinate on it"
            )
    created = ctx.cluster.create_topic(args.name, args.partitions, config or None)
    emit(
        ctx.as_json,
        _description_payload(created),
        f"created topic {created.name!r} with {created.partitions} partition(s)",
    )
    return 0


def _list(args: argparse.Namespace, ctx: Context) -> int:
    cluster = ctx.cluster
    rows = []
    for name in cluster.topics():
        description = cluster.describe_topic(name)
        rows.append(
            {
                "topic": name,
                "partitions": description.partitions,
                "records": sum(o.latest - o.earliest for o in description.offsets),
            }
        )
    if ctx.as_json:
        emit(True, rows)
    else:
        print_table(rows, ["topic", "partitions", "records"])
    return 0


def _describe(args: argparse.Namespace, ctx: Context) -> int:
    description = ctx.cluster.describe_topic(args.name)
    if ctx.as_json:
        emit(True, _description_payload(description))
        return 0
    print(f"topic {description.name}: {description.partitions} partition(s)")
    for name, value in sorted(description.config.items()):
        print(f"  {name} = {value}")
    print_table([attrs.asdict(o) for o in description.offsets], ["partition", "earliest", "latest"])
    return 0


def _named_once(pairs: Iterable[tuple[str, _V]], hint: str = "") -> dict[str, _V]:
    """Configs given as (name, value) pairs, a name given twice refused (the last one won
    silently; Kafka's broker refuses a request naming a key twice)."""
    out: dict[str, _V] = {}
    for name, value in pairs:
        if name in out:
            raise CliError(f"config {name!r} is given twice{hint}")
        out[name] = value
    return out


def _refuse_coordination_topic(args: argparse.Namespace, doing: str) -> None:
    """Kafka's topic tool refused to delete its internal topics; logmarshal's hold every
    group's coordination state, so changing one takes ``--force``."""
    if args.name in _COORDINATION_TOPICS and not args.force:
        raise CliError(
            f"{args.name} is one of logmarshal's coordination topics ({_INTERNAL}): {doing} it "
            "can lose every group's positions, claims and pauses; give --force to do it anyway"
        )


def _delete(args: argparse.Namespace, ctx: Context) -> int:
    _refuse_coordination_topic(args, "deleting")
    ctx.cluster.delete_topic(args.name)
    emit(ctx.as_json, {"deleted": args.name}, f"deleted topic {args.name!r}")
    return 0


def _alter(args: argparse.Namespace, ctx: Context) -> int:
    given: list[tuple[str, str | None]] = []
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--set takes NAME=VALUE, got {item!r}")
        given.append((name.strip(), value.strip()))
    given += ((name.strip(), None) for name in args.delete)
    changes = _named_once(given, " (--set or --delete once each)")
    if not changes:
        raise CliError("nothing to change: give --set NAME=VALUE or --delete NAME")
    _refuse_coordination_topic(args, "altering")
    altered = ctx.cluster.alter_topic_config(args.name, changes)
    emit(
        ctx.as_json,
        _description_payload(altered),
        f"topic {altered.name!r}: "
        + ", ".join(f"{k}={altered.config.get(k, '(default)')}" for k in sorted(changes)),
    )
    return 0


def _add_partitions(args: argparse.Namespace, ctx: Context) -> int:
    _refuse_coordination_topic(args, "growing")
    grown = ctx.cluster.add_partitions(args.name, args.total)
    emit(
        ctx.as_json,
        _description_payload(grown),
        f"topic {grown.name!r} now has {grown.partitions} partition(s)",
    )
    return 0
