"""``logmarshal streams``: run a topology as a member of its application, describe one,
or run the streams demo (KIP-28 word count with a member crash, then a windowed count)."""

from __future__ import annotations

import argparse
import collections
import importlib
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from storage import NewRecord

from ..streams import App, Topology
from ..streams.examples import windowed_count, word_count
from ..streams.task import read_changelog
from .argtypes import positive, seconds
from .context import READS, CliError, Context, DataSource, declare, describe_json, refuse_json
from .output import emit

__all__ = ["load_topology", "register", "topology_json"]


#: describe loads a topology and prints it: there is no data to read
NO_CLUSTER = DataSource(
    help="none: it loads MODULE:ATTRIBUTE and prints it; --bootstrap and --data-dir are refused",
    short="no cluster; refuses both",
    refuse_bootstrap="it only prints a topology and opens no cluster",
    refuse_data_dir="it only prints a topology and opens no cluster",
)
#: the streams demo, like ``logmarshal demo``: a temporary cluster unless told otherwise
STREAMS_DEMO = DataSource(
    help=(
        "a fresh temporary embedded cluster, deleted at the end (not $LOGMARSHAL_DATA_DIR); "
        "--data-dir DIR runs the demo in DIR (created if missing, kept) and --bootstrap "
        "HOST:PORT,... on those brokers; there its topics and application ids end in -RUN "
        "(the run's UTC time and a random tag), so a rerun never meets an earlier run's, and "
        "they are left behind for inspection"
    ),
    short="temporary cluster; --bootstrap or --data-dir (created)",
    existing=False,
)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    streams = commands.add_parser("streams", parents=[common], help="KIP-28 stream processing")
    sub = streams.add_subparsers(dest="streams_command", metavar="SUBCOMMAND", required=True)
    run = sub.add_parser("run", parents=[common], help="run MODULE:TOPOLOGY until interrupted")
    run.add_argument("topology", help="module:attribute, a Topology or a function returning one")
    run.add_argument("--application-id", required=True, help="group id and changelog prefix")
    run.add_argument("--client-id", default=None, help="default: <application-id>-<pid>")
    run.add_argument("--state-dir", default="streams-state", help="persistent stores' directory")
    run.add_argument("--heartbeat", type=seconds, default=1.0, help="HB seconds (default: 1)")
    run.set_defaults(func=_run)
    declare(run, READS)
    refuse_json(
        run,
        "it prints nothing to turn into JSON: its results go to the topology's sink topics "
        "and changelogs (read them with 'logmarshal --json read')",
    )
    describe = sub.add_parser("describe", parents=[common], help="print a topology")
    describe.add_argument("topology", help="module:attribute")
    describe.set_defaults(func=_describe)
    declare(describe, NO_CLUSTER)
    describe_json(
        describe,
        'the topology as one JSON document: {"subtopologies": [{"index", "source_topics", '
        '"stores", "nodes": [{"name", "type": source|processor|sink, "children", ...}]}], '
        '"stores": [{"name", "kind", "logged"}]}',
    )
    demo = sub.add_parser("demo", parents=[common], help="word count with a crash, windowed count")
    demo.add_argument("--lines", type=positive, default=2000, help="default: 2000")
    demo.set_defaults(func=_demo)
    declare(demo, STREAMS_DEMO)
    describe_json(
        demo,
        "no progress lines; one JSON document at the end: the word-count topology, the "
        'counts against the true ones ("exact"), the windowed counts, and on --data-dir or '
        '--bootstrap the run tag and the topics left behind ("left_behind")',
    )


def load_topology(spec: str) -> Topology:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"expected module:attribute, got {spec!r}")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise CliError(f"cannot load {spec}: {exc}") from None
    except Exception as exc:  # the module's own failure (a SyntaxError, a raise): where it is
        frames = traceback.extract_tb(exc.__traceback__)
        inside = not isinstance(exc, SyntaxError) and frames  # (a SyntaxError says where)
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if inside else ""
        raise CliError(
            f"cannot load {spec}: importing {module_name} raised {type(exc).__name__}{where}: {exc}"
        ) from None
    topology = obj
    if callable(obj) and not isinstance(obj, Topology):
        try:  # a factory: whatever it raises is the user's to read, not a traceback of ours
            topology = obj()
        except Exception as exc:
            raise CliError(f"{spec}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(topology, Topology):
        raise CliError(f"{spec} is not a Topology (got {type(topology).__name__})")
    return topology


def topology_json(topology: Topology) -> dict[str, Any]:
    """What :meth:`Topology.describe` prints, as data: sub-topologies with their nodes."""
    subtopologies = []
    for sub in topology.subtopologies():
        nodes: list[dict[str, Any]] = []
        for name in sub.nodes:
            node: dict[str, Any] = {"name": name, "children": topology.children_of(name)}
            if name in topology.sources:
                source = topology.sources[name]
                node["type"] = "source"
                if source.pattern is not None:
                    node["pattern"] = source.pattern.pattern
                else:
                    node["topics"] = list(source.topics)
            elif name in topology.processors:
                node["type"] = "processor"
                node["parents"] = list(topology.processors[name].parents)
                node["stores"] = sorted(
                    store for store, users in topology.store_users.items() if name in users
                )
            else:
                sink = topology.sinks[name]
                node.update(type="sink", topic=sink.topic, parents=list(sink.parents))
            nodes.append(node)
        subtopologies.append(
            {
                "index": sub.index,
                "source_topics": list(sub.source_topics),
                "stores": list(sub.stores),
                "nodes": nodes,
            }
        )
    stores = [
        {"name": spec.name, "kind": spec.kind, "logged": spec.logged}
        for spec in sorted(topology.stores.values(), key=lambda spec: spec.name)
    ]
    return {"subtopologies": subtopologies, "stores": stores}


def _describe(args: argparse.Namespace, ctx: Context) -> int:
    topology = load_topology(args.topology)
    if ctx.as_json:
        emit(True, topology_json(topology))
    else:
        print(topology.describe())
    return 0


def _run(args: argparse.Namespace, ctx: Context) -> int:
    app = App(
        ctx.cluster,
        args.application_id,
        load_topology(args.topology),
        client_id=args.client_id,
        heartbeat_interval=args.heartbeat,
        state_dir=args.state_dir,
    )
    previous = signal.signal(signal.SIGTERM, lambda *_: app.stop())
    try:
        app.run()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        app.close()
    return 0


TEXT = (
    "all streams lead to the log",
    "the log is the truth",
    "streams of records flow",
    "the processor counts the words",
    "state lives in the changelog",
)


def _demo(args: argparse.Namespace, ctx: Context) -> int:
    from .demo import run_tag, sigterm_interrupts

    say = (lambda _text: None) if ctx.as_json else print
    with (
        sigterm_interrupts(),
        tempfile.TemporaryDirectory(prefix="logmarshal-streams-demo-") as tmp,
    ):
        if ctx.bootstrap is None and ctx.explicit_data_dir is None:
            temporary = Context(data_dir=f"{tmp}/data", as_json=ctx.as_json)
            try:
                code, result = _demo_on(temporary.cluster, tmp, args.lines, "", say)
            finally:
                temporary.close()
            emit(ctx.as_json, result)
            return code
        # stores' local state is scratch (the changelogs are the truth): it stays in tmp
        tag = f"-{run_tag()}"
        cluster = ctx.cluster  # an unreachable broker or a locked directory: before any output
        say(f"on {ctx.where()}; topics and application ids end in {tag}")
        code, result = _demo_on(cluster, tmp, args.lines, tag, say)
        left = [
            f"lines{tag}",
            f"word-counts{tag}",
            f"clicks{tag}",
            f"clicks-per-minute{tag}",
            f"wordcount{tag}-counts-changelog",
            f"clicks{tag}-clicks-per-window-changelog",
        ]
        say(
            f"left behind: topics lines{tag}, word-counts{tag}, clicks{tag}, "
            f"clicks-per-minute{tag}, the changelogs wordcount{tag}-counts-changelog and "
            f"clicks{tag}-clicks-per-window-changelog, and the two applications' records in "
            "__marshal"
        )
        emit(ctx.as_json, {**result, "where": ctx.where(), "tag": tag, "left_behind": left})
        return code


def _demo_on(
    cluster: Any, tmp: str, n: int, tag: str, say: Callable[[str], object]
) -> tuple[int, dict[str, Any]]:
    """The demo on ``cluster``; ``tag`` ends every topic and application id ("" for none).
    Returns the exit status and what happened, as the JSON document of ``--json``."""
    lines, words, wordcount = f"lines{tag}", f"word-counts{tag}", f"wordcount{tag}"
    clicks_in, clicks_out, clicks_app = f"clicks{tag}", f"clicks-per-minute{tag}", f"clicks{tag}"
    cluster.create_topic(lines, 2)
    cluster.create_topic(words, 2)
    now = int(time.time() * 1000)
    truth: collections.Counter[str] = collections.Counter()
    for p in (0, 1):
        batch = []
        for i in range(p, n, 2):
            line = TEXT[i % len(TEXT)]
            truth.update(line.split())
            batch.append(NewRecord(line.encode(), timestamp=now + i))
        cluster.produce(lines, p, batch)
    say(f"produced {n} lines to {lines!r} (2 partitions); word-count topology:")
    topo = word_count(lines, words, store_kind="persistent")
    say(topo.describe())
    first = App(
        cluster,
        wordcount,
        topo,
        client_id="member-1",
        heartbeat_interval=0.5,
        state_dir=f"{tmp}/m1",
        commit_interval=0.05,
    )
    t = threading.Thread(target=first.run, kwargs={"max_records": n // 3}, daemon=True)
    t.start()
    try:
        t.join()
    finally:
        # a crash: no final commit, no release; the changelog and the heartbeats stay as
        # they were (and on Ctrl-C too: a member left running kept the process alive)
        first.consumer.close(release=False)
        first.producer.close()
        first.marshaler.close()
    say(f"member-1 processed {n // 3} lines and crashed; member-2 takes over after 2·HB")
    second = App(
        cluster,
        wordcount,
        word_count(lines, words, store_kind="persistent"),
        client_id="member-2",
        heartbeat_interval=0.5,
        state_dir=f"{tmp}/m2",
        commit_interval=0.05,
    )
    stop_at = time.monotonic() + 30
    runner = threading.Thread(target=second.run, daemon=True)
    runner.start()
    try:
        while time.monotonic() < stop_at:
            counts = _counts(cluster, wordcount, "counts")
            if counts == truth:
                break
            time.sleep(0.1)
    finally:
        second.close()
        runner.join()
    counts = _counts(cluster, wordcount, "counts")
    say(f"{'word':<12}{'count':>7}{'true':>7}")
    for word in sorted(truth):
        say(f"{word:<12}{counts.get(word, 0):>7}{truth[word]:>7}")
    exact = counts == truth
    say("exactly the true counts in the store: " + ("yes" if exact else "NO"))

    cluster.create_topic(clicks_in, 1)
    cluster.create_topic(clicks_out, 1)
    minute = now - now % 60_000
    clicks = [("ann", minute + s * 1000) for s in (1, 20, 59, 61, 130)] + [
        ("bob", minute + s * 1000) for s in (5, 65, 66)
    ]
    cluster.produce(
        clicks_in,
        0,
        [NewRecord(b'"click"', key=f'"{u}"'.encode(), timestamp=ts) for u, ts in clicks],
    )
    app = App(
        cluster,
        clicks_app,
        windowed_count(clicks_in, clicks_out),
        client_id="w1",
        heartbeat_interval=0.5,
        state_dir=f"{tmp}/w",
        commit_interval=0.05,
    )
    try:
        app.run(max_records=len(clicks))
    finally:
        app.close()
    table, _ = read_changelog(cluster, clicks_app, "clicks-per-window", 0)
    say("clicks per user per tumbling minute of event time:")
    windows = []
    for (user, start), count in sorted(table.items()):
        say(f"  {user:<5} minute +{(start - minute) // 60_000}: {count}")
        windows.append({"user": user, "minute": (start - minute) // 60_000, "count": count})
    result = {
        "lines": n,
        "topology": topology_json(topo),
        "crashed_after": n // 3,
        "counts": {word: {"count": counts.get(word, 0), "true": truth[word]} for word in truth},
        "exact": exact,
        "clicks_per_minute": windows,
    }
    return (0 if exact else 1), result


def _counts(cluster: Any, app: str, store: str) -> collections.Counter:
    total: collections.Counter = collections.Counter()
    for p in range(cluster.partitions(f"{app}-{store}-changelog")):
        total.update(read_changelog(cluster, app, store, p)[0])
    return total
