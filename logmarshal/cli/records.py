"""``logmarshal produce`` and ``logmarshal read``: records in and out, no group involved."""

from __future__ import annotations

import argparse
import base64
import sys
from collections import defaultdict
from typing import Any

from ..cluster import FETCH_MAX_BYTES, Message
from ..errors import LogmarshalError
from ..producer import Delivery, Producer
from .argtypes import non_negative, positive, seconds_or_zero
from .context import READS, CliError, Context, declare, describe_json
from .output import emit

__all__ = ["register"]

_FETCH_BYTES = FETCH_MAX_BYTES


def _start_offset(text: str) -> int | str:
    if text in ("earliest", "latest"):
        return text
    value = non_negative(text)
    return value


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    produce = commands.add_parser(
        "produce",
        parents=[common],
        help="write lines from stdin to a topic, one record per line",
        description=(
            "Write each line of stdin as one record. With --key-separator, the text before "
            "the first separator is the key and the rest the value; a line without it is an "
            "error (lines before it are kept)."
        ),
    )
    produce.add_argument("topic")
    produce.add_argument(
        "--key-separator", metavar="SEP", help="split each line into key SEP value"
    )
    # (both given, the partitioner was ignored without a word)
    placement = produce.add_mutually_exclusive_group()
    placement.add_argument("--partition", type=non_negative, help="write every record to this one")
    placement.add_argument(
        "--partitioner",
        choices=["murmur2", "mmh3", "round_robin"],
        default="murmur2",
        help="how keys choose a partition (default: murmur2, as Kafka's Java client)",
    )
    produce.set_defaults(func=_produce)
    declare(produce, READS)  # the topic must exist already

    read = commands.add_parser(
        "read",
        parents=[common],
        help="print records of one partition from an offset (low level, no group)",
    )
    read.add_argument("topic")
    read.add_argument("--partition", "-p", type=non_negative, default=0, help="default: 0")
    read.add_argument(
        "--offset",
        "-o",
        type=_start_offset,
        default="earliest",
        help="first offset to print, or earliest|latest (default: earliest)",
    )
    read.add_argument(
        "--count", "-n", type=positive, help="stop after this many (default: up to the end)"
    )
    read.add_argument(
        "--wait",
        type=seconds_or_zero,
        default=0.0,
        metavar="SECONDS",
        help="with --count, wait this long for records not written yet (default: 0)",
    )
    read.set_defaults(func=_read)
    describe_json(
        read,
        "one object per record: partition, offset, timestamp, key, value (text, null for "
        "none) and headers (a list of {key, value}, in order); a key or value that is no "
        "UTF-8 is also given whole as key_base64 / value_base64 (its text escapes what is "
        "not UTF-8 with backslashes)",
    )
    declare(read, READS)


def _produce(args: argparse.Namespace, ctx: Context) -> int:
    futures: list[Delivery | LogmarshalError] = []  # (a send refused at once: its error)
    problem: str | None = None
    interrupted = False
    ctx.cluster.partitions(args.topic)  # an unknown topic is an error with no input too
    with Producer(ctx.cluster, partitioner=args.partitioner) as producer:
        try:
            for number, raw in enumerate(sys.stdin.buffer, start=1):
                line = raw.rstrip(b"\r\n")
                key = None
                if args.key_separator is not None:
                    key, sep, line = line.partition(args.key_separator.encode())
                    if not sep:
                        problem = f"line {number} has no key separator {args.key_separator!r}"
                        break
                try:
                    futures.append(
                        producer.send(args.topic, line, key=key, partition=args.partition)
                    )
                except LogmarshalError as exc:  # over the network, one over the size limit
                    futures.append(exc)
        except KeyboardInterrupt:  # Ctrl-C: what was sent is written, and said (it was not)
            interrupted = True
    offsets: dict[int, list[int]] = defaultdict(list)
    failed: list[tuple[int, BaseException]] = []  # (line number, why), each line is a record
    for number, future in enumerate(futures, start=1):
        if isinstance(future, LogmarshalError):
            failed.append((number, future))
            continue
        try:
            meta = future.result()
        except LogmarshalError as exc:
            failed.append((number, exc))
            continue
        offsets[meta.partition].append(meta.offset)
    written = len(futures) - len(failed)
    ranges = {p: [min(o), max(o)] for p, o in sorted(offsets.items())}
    where = ", ".join(f"partition {p} offsets {lo}..{hi}" for p, (lo, hi) in ranges.items())
    doc: dict[str, Any] = {"topic": args.topic, "records": written, "offsets": ranges}
    if failed:
        doc["failed_lines"] = [n for n, _ in failed]
    emit(
        ctx.as_json,
        doc,
        f"produced {written} record(s) to {args.topic!r}" + (f": {where}" if where else ""),
    )
    if failed:
        number, why = failed[0]
        more = f" (and {len(failed) - 1} more line(s))" if len(failed) > 1 else ""
        raise CliError(
            f"line {number} was not written: {why}{more}; {written} of {len(futures)} were"
        )
    if problem:
        raise CliError(f"{problem}; the {len(futures)} line(s) before it were written")
    if interrupted:
        print(f"interrupted: the {written} line(s) read before it were written", file=sys.stderr)
        raise KeyboardInterrupt
    return 0


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _field(doc: dict[str, Any], name: str, data: bytes | None) -> dict[str, Any]:
    """``doc[name]``: ``data`` as text; bytes that are no UTF-8 also as ``<name>_base64``
    (the text alone, backslash-escaped, could not tell the byte 0xff from the text
    ``\\xff``: the record's bytes were not in the document)."""
    if data is None:
        doc[name] = None
        return doc
    try:
        doc[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        doc[name] = _text(data)
        doc[f"{name}_base64"] = base64.b64encode(data).decode("ascii")
    return doc


def _print_message(message: Message, as_json: bool) -> None:
    if as_json:
        payload: dict[str, Any] = {
            "partition": message.partition,
            "offset": message.offset,
            "timestamp": message.timestamp,
        }
        _field(payload, "key", message.key)
        _field(payload, "value", message.value)
        # in order, every one (a name may repeat, as in Kafka: a dict by name kept the last)
        payload["headers"] = [_field({"key": k}, "value", v) for k, v in message.headers]
        emit(True, payload)
        return
    key = "" if message.key is None else f"{_text(message.key)}\t"
    print(f"{message.offset}\t{key}{_text(message.value)}")


def _read(args: argparse.Namespace, ctx: Context) -> int:
    if args.wait and args.count is None:  # (it was ignored without a word)
        raise CliError(
            "--wait needs --count: without it the read stops at the log end it found first"
        )
    cluster = ctx.cluster
    topic, partition = args.topic, args.partition
    if not 0 <= partition < cluster.partitions(topic):
        raise CliError(
            f"topic {topic!r} has partitions 0..{cluster.partitions(topic) - 1}, not {partition}"
        )
    earliest = cluster.earliest_offset(topic, partition)
    latest = cluster.latest_offset(topic, partition)
    offset = {"earliest": earliest, "latest": latest}.get(args.offset, args.offset)
    if not earliest <= offset <= latest:
        raise CliError(
            f"offset {offset} is outside {topic}/{partition}, which holds {earliest}..{latest - 1}"
            f" (next offset {latest})"
        )
    end = None if args.count else latest
    printed = 0
    while args.count is None or printed < args.count:
        if end is not None and offset >= end:
            break
        batch = cluster.fetch(topic, partition, offset, max_bytes=_FETCH_BYTES, max_wait=args.wait)
        if not batch:
            if end is not None:
                # offsets were there when the read began: say where it stopped, and why
                # that can be (a read of committed records answers nothing for a tail of
                # transaction markers, as Kafka's tools do)
                print(
                    f"logmarshal: no records from offset {offset} on, though "
                    f"{topic}/{partition} ended at {end} when the read began (offsets that "
                    "hold no record to show: transaction markers, aborted or compacted-away "
                    "records; or a broker that answered nothing)",
                    file=sys.stderr,
                )
            break
        for message in batch:
            if args.count is not None and printed >= args.count:
                break
            _print_message(message, ctx.as_json)
            printed += 1
            offset = message.offset + 1
    if args.count is not None and printed < args.count:
        print(f"logmarshal: only {printed} record(s) available", file=sys.stderr)
    return 0
