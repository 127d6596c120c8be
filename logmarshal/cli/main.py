"""The ``logmarshal`` command: parsing, connection, and turning mistakes into one clear line."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Sequence

from rationalizer import UnknownVersion
from storage._errors import StorageError

from ..errors import LogmarshalError
from . import audit, broker, coord, demo, group, records, streams, topic
from .argtypes import non_empty_path
from .context import CliError, Context, DataSource, commands_of
from .output import said

__all__ = ["build_parser", "main"]

_EXIT_USER_ERROR = 1
_EXIT_INTERRUPTED = 130
#: a command that declared no data source refuses both options rather than ignore one
_UNDECLARED = DataSource(
    help="undeclared",
    refuse_bootstrap="this command does not say where its data comes from",
    refuse_data_dir="this command does not say where its data comes from",
)


def _common_options(defaults: bool) -> argparse.ArgumentParser:
    """Options every command takes, before or after the command name.

    The subcommands' copies default to SUPPRESS so they never overwrite a value given
    before the command name.
    """
    parser = argparse.ArgumentParser(add_help=False)
    missing = None if defaults else argparse.SUPPRESS
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        default=missing,
        type=non_empty_path,  # ("" fell back to the default directory without a word)
        help="embedded cluster directory (default: $LOGMARSHAL_DATA_DIR or ./data); "
        "each command's --help says whether it uses it",
    )
    parser.add_argument(
        "--bootstrap",
        metavar="HOST:PORT,...",
        default=missing,
        help="use Kafka brokers (logmarshal's or Apache Kafka's) instead of a data directory; "
        "each command's --help says whether it uses them",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if defaults else argparse.SUPPRESS,
        help="print machine-readable JSON instead of tables",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if defaults else argparse.SUPPRESS,
        help="log more (repeat for debug output)",
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="logmarshal",
        description=(
            "Coordinator-free consumer groups over a partitioned log. Commands work on\n"
            "brokers (--bootstrap) or an embedded data directory (--data-dir); a command\n"
            "that cannot use the option given refuses it with an error."
        ),
        parents=[_common_options(defaults=True)],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = _common_options(defaults=False)
    topic.register(commands, common)
    records.register(commands, common)
    demo.register(commands, common)
    broker.register(commands, common)
    coord.register(commands, common)
    group.register(commands, common)
    audit.register(commands, common)
    streams.register(commands, common)
    parser.epilog = _overview(parser)
    return parser


def _overview(parser: argparse.ArgumentParser) -> str:
    """Where each command's data comes from, from the commands' own declarations."""
    rows = []
    for name, command in commands_of(parser):
        source = command.get_default("data_source")
        rows.append((name, source.short if source is not None else "undeclared"))
    width = max(len(name) for name, _ in rows)
    lines = [f"  {name.ljust(width)}  {short}" for name, short in rows]
    return (
        "where each command's data comes from (--data-dir defaults to\n"
        "$LOGMARSHAL_DATA_DIR, else ./data; COMMAND --help says more):\n" + "\n".join(lines)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    source: DataSource = getattr(args, "data_source", _UNDECLARED)
    try:
        source.admit(args.bootstrap, args.data_dir, getattr(args, "command_name", ""))
        refusal = getattr(args, "json_refusal", None)
        if args.json and refusal is not None:
            raise CliError(f"{getattr(args, 'command_name', '')} refuses --json: {refusal}")
        ctx = Context(
            data_dir=args.data_dir,
            as_json=args.json,
            bootstrap=args.bootstrap,
            existing=source.existing,
        )
    except CliError as exc:
        print(f"logmarshal: error: {exc}", file=sys.stderr)
        return _EXIT_USER_ERROR
    try:
        status = args.func(args, ctx) or 0
        sys.stdout.flush()  # (here, not at exit: a reader gone is a BrokenPipeError below)
        return status
    except (
        CliError,
        StorageError,
        LogmarshalError,
        UnknownVersion,
        ValueError,
        NotImplementedError,
    ) as exc:
        print(f"logmarshal: error: {said(str(exc))}", file=sys.stderr)
        return _EXIT_USER_ERROR
    except KeyboardInterrupt:
        return _EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `logmarshal read ... | head`
        # what is still buffered would fail again at exit ("Exception ignored ... exit 120"):
        # stdout goes nowhere from here on (the recipe of Python's signal docs)
        with contextlib.suppress(OSError, ValueError):
            nowhere = os.open(os.devnull, os.O_WRONLY)
            os.dup2(nowhere, sys.stdout.fileno())
            os.close(nowhere)
        return 0
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""  # (a timeout names no file)
        print(f"logmarshal: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return _EXIT_USER_ERROR
    finally:
        ctx.close()


if __name__ == "__main__":
    sys.exit(main())
