"""``logmarshal demo``: the main job a newcomer runs first, on a temporary embedded cluster,
or in a data directory (``--data-dir``) or on brokers (``--bootstrap``) the user names.

It produces a keyed stream, runs a group of consumers that share its partitions through the
coordination log alone, kills one of them abruptly (no release, as a crash would), prints the
failover as it happens, then starts a new member and prints how the group rebalances to give
it its share (members announce themselves in the log; over-share members release exactly
what moves: docs/rebalancing.md). It ends with a tally: handled, lost, repeated.
At-least-once mode: nothing may be lost; the few messages the dead member handled after its
last heartbeat are handled again by its successor, and the tally says how many (a
rebalancing move repeats nothing).

On a cluster that outlives the run (``--data-dir``, ``--bootstrap``) the topic and the group
carry a run tag, so a rerun never meets an earlier run's records or its positions in
``__marshal``, and nothing of the user's is ever deleted; both are left behind for inspection.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import secrets
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, cast

from .._faults import FaultyCluster
from ..cluster import Cluster, Message
from ..consumer import Consumer
from ..errors import ClosedError
from ..marshaler import Marshaler
from ..partitioners import Murmur2Partitioner
from ..producer import Producer
from .argtypes import positive, seconds
from .context import Context, DataSource, declare
from .output import emit, print_table

__all__ = ["DEMO", "register", "run_demo", "run_tag"]

DEMO_TOPIC = "demo-events"
DEMO_GROUP = "demo"

DEMO = DataSource(
    help=(
        "a fresh temporary embedded cluster, deleted at the end (not $LOGMARSHAL_DATA_DIR); "
        "--data-dir DIR runs the demo in DIR (created if missing, kept) and --bootstrap "
        f"HOST:PORT,... on those brokers. There the topic is {DEMO_TOPIC}-RUN and the group "
        f"{DEMO_GROUP}-RUN (RUN: the run's UTC time and a random tag), so a rerun never meets "
        "an earlier run's records or positions; the topic and the group's records in "
        "__marshal are left behind (the demo prints how to inspect and delete them)"
    ),
    short="temporary cluster; --bootstrap or --data-dir (created)",
    existing=False,
)


def run_tag() -> str:
    """The run's UTC time and a random tag: names on a shared cluster that no rerun reuses."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(2)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    demo = commands.add_parser(
        "demo",
        parents=[common],
        help="run the demo on a temporary embedded cluster, or in --data-dir, or on --bootstrap",
        description=(
            "Produce a keyed stream, consume it with a group of consumers, kill one abruptly, "
            "show the failover, add a member and show the group rebalance, and tally handled / "
            "lost / repeated. With --data-dir or --bootstrap what the demo wrote stays there "
            "(inspect it with the other commands)."
        ),
    )
    demo.add_argument("--records", type=positive, default=10_000, help="default: 10000")
    demo.add_argument("--partitions", type=positive, default=6, help="default: 6")
    demo.add_argument("--keys", type=positive, default=50, help="distinct keys (default: 50)")
    demo.add_argument(
        "--consumers",
        type=_two_or_more,
        default=3,
        help="group size, at least 2: one is killed and another takes over (default: 3)",
    )
    demo.add_argument(
        "--heartbeat", type=seconds, default=1.0, help="heartbeat interval HB, seconds (default: 1)"
    )
    demo.add_argument("--seed", type=int, default=None, help="which member dies, and when")
    demo.set_defaults(func=_demo)
    declare(demo, DEMO)


def _two_or_more(text: str) -> int:
    value = positive(text)
    if value < 2:
        raise argparse.ArgumentTypeError(
            f"must be at least 2, got {value}: the demo kills one and shows another take over"
        )
    return value


def _demo(args: argparse.Namespace, ctx: Context) -> int:
    if ctx.bootstrap is None and ctx.explicit_data_dir is None:
        with (
            sigterm_interrupts(),
            tempfile.TemporaryDirectory(prefix="logmarshal-demo-") as tmp,
        ):
            temporary = Context(data_dir=tmp, as_json=ctx.as_json)
            try:
                return _run_on(temporary, args, DEMO_TOPIC, DEMO_GROUP, kept=False)
            finally:
                temporary.close()
    tag = run_tag()
    return _run_on(ctx, args, f"{DEMO_TOPIC}-{tag}", f"{DEMO_GROUP}-{tag}", kept=True)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """A SIGTERM ends a demo as Ctrl-C does, its temporary directory removed (it was left);
    in the main thread only (signals are set there)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _lines() -> Callable[[str], None]:
    """print, one whole line at a time: members report from their own threads."""
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            print(text, flush=True)

    return say


def _run_on(ctx: Context, args: argparse.Namespace, topic: str, group: str, kept: bool) -> int:
    say = (lambda _text: None) if ctx.as_json else _lines()
    cluster = ctx.cluster  # an unreachable broker or a locked directory: before any output
    if ctx.bootstrap is not None:
        say(f"brokers at {ctx.bootstrap}")
    else:
        say(f"embedded cluster in {ctx.data_dir}" + ("" if kept else " (temporary)"))
    tally = run_demo(
        cluster,
        args.records,
        args.partitions,
        args.keys,
        say,
        consumers=args.consumers,
        heartbeat=args.heartbeat,
        seed=args.seed,
        topic=topic,
        group=group,
    )
    if ctx.as_json:
        emit(True, tally)
    else:
        print_table(tally["members"], ["member", "handled", "partitions_at_end", "state"])
        if kept:
            where = (
                f"--bootstrap {ctx.bootstrap}"
                if ctx.bootstrap is not None
                else f"--data-dir {ctx.data_dir}"
            )
            print(
                f"left behind: topic {topic} ({args.records} records) and the records of group "
                f"{group} in __marshal. Inspect: logmarshal {where} group describe {group}; "
                f"delete the topic: logmarshal {where} topic delete {topic}"
            )
    return 0 if tally["lost"] == 0 and tally["misplaced"] == 0 else 1


class _Member:
    """One consumer of the group, with its own connection (so it can be killed alone)."""

    def __init__(
        self,
        cluster: Cluster,
        name: str,
        hb: float,
        say: Callable[[str], None],
        t0: float,
        done: threading.Event,
        topic: str = DEMO_TOPIC,
        group: str = DEMO_GROUP,
    ) -> None:
        self.name = name
        self.connection = FaultyCluster(cluster, name=name)
        # the Marshaler uses only what a FaultyCluster has (it never alters a topic's config)
        self.marshaler = Marshaler(cast(Cluster, self.connection), name, group, hb, fetch_wait=0.2)

        def assigned(ps: list[tuple[str, int]]) -> None:
            if not done.is_set():
                say(f"  {time.monotonic() - t0:6.2f} s  {name} now owns " + _names(ps))

        def revoked(ps: list[tuple[str, int]]) -> None:
            if not done.is_set():
                say(
                    f"  {time.monotonic() - t0:6.2f} s  {name} hands over "
                    + _names(ps)
                    + " (rebalance)"
                )

        self.consumer = Consumer(
            self.marshaler, topic, batch_size=200, on_assigned=assigned, on_revoked=revoked
        )
        self.handled: Counter[tuple[int, int]] = Counter()
        self.values: list[Message] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._work, name=f"demo-{name}", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        with contextlib.suppress(ClosedError):  # killed between its check and a call
            while not self.stop.is_set():
                for message in self.consumer.poll(0.1):
                    if self.stop.is_set():
                        return  # died mid-batch: the rest was never handled
                    self.handled[(message.partition, message.offset)] += 1
                    self.values.append(message)
                    self.consumer.commit(message)

    def kill(self) -> None:
        """Stop dead: no more handling, no release, no writes (its threads just end)."""
        self.stop.set()
        self.consumer.close(release=False)
        self.marshaler.close()
        self.connection.kill()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.consumer.close(release=not self.connection.killed)
        self.marshaler.close()

    def row(self) -> dict[str, Any]:
        """The member's line of the tally."""
        return {
            "member": self.name,
            "handled": sum(self.handled.values()),
            "partitions_at_end": len(self.consumer.claims()),
            "state": "killed" if self.connection.killed else "alive",
        }


def _names(partitions: Any) -> str:
    return ", ".join(f"p{p}" for _, p in partitions)


class _Group:
    """The demo's group as it runs: its members, the living ones, and an observer's view of
    who holds what (the observer replays the coordination log and writes nothing)."""

    def __init__(
        self,
        cluster: Cluster,
        topic: str,
        group: str,
        n_partitions: int,
        heartbeat: float,
        say: Callable[[str], None],
        consumers: int,
    ) -> None:
        self.cluster, self.topic, self.group = cluster, topic, group
        self.n_partitions, self.heartbeat, self.say = n_partitions, heartbeat, say
        self.t0 = time.monotonic()
        self.done = threading.Event()  # quiet from here: the clean shutdown hands partitions around
        self.members = [self._member(f"c{i}") for i in range(consumers)]
        self.observer = Marshaler(cluster, "demo-observer", group, heartbeat, fetch_wait=0.2)
        self.alive = list(self.members)

    def _member(self, name: str) -> _Member:
        return _Member(
            self.cluster, name, self.heartbeat, self.say, self.t0, self.done, self.topic, self.group
        )

    def at(self, text: str) -> None:
        """Say ``text`` after the seconds since the group started."""
        self.say(f"  {time.monotonic() - self.t0:6.2f} s  {text}")

    def held(self) -> Counter[Any]:
        return Counter(self.observer.holder(self.topic, p) for p in range(self.n_partitions))

    def owned_by(self, who: list[_Member]) -> bool:
        ids = {m.marshaler.identity for m in who}
        return all(self.observer.holder(self.topic, p) in ids for p in range(self.n_partitions))

    def fair(self, who: list[_Member]) -> bool:
        """Every partition held by one of ``who``, each holding its share (within one)."""
        if not self.owned_by(who):
            return False
        held = self.held()
        low, high = self.n_partitions // len(who), -(-self.n_partitions // len(who))
        return all(low <= held[m.marshaler.identity] <= high for m in who)

    def wait(self, predicate: Callable[[], bool]) -> None:
        _wait(predicate, 10 + 4 * self.heartbeat)

    def kill_one(self, rng: random.Random) -> tuple[_Member, float]:
        """Kill a member at random; return it and the seconds until the survivors own all."""
        victim = rng.choice(self.members)
        lost_partitions = sorted(p for _, p in victim.consumer.claims())
        killed_at = time.monotonic()
        # said first: closing a member's clients can take a while over the network, and the
        # lines of the other members must not come before this one
        self.say(
            f"  {killed_at - self.t0:6.2f} s  killed {victim.name} (no release) while it held "
            + ", ".join(f"p{p}" for p in lost_partitions)
            + f"; its claims go stale after 2·HB = {2 * self.heartbeat:g} s"
        )
        victim.kill()
        self.alive.remove(victim)
        self.wait(lambda: self.owned_by(self.alive))
        failover = time.monotonic() - killed_at
        self.at(f"failover complete: {failover:.2f} s after the kill")
        return victim, failover

    def join_one(self, name: str) -> tuple[_Member, float]:
        """Start a new member; return it and the seconds until the group is fair again."""
        joiner = self._member(name)
        self.members.append(joiner)
        self.alive.append(joiner)
        joined_at = time.monotonic()
        self.at(f"{joiner.name} joins the group")
        self.wait(lambda: self.fair(self.alive))
        rebalanced = time.monotonic() - joined_at
        held = self.held()
        shares = ", ".join(f"{m.name} {held[m.marshaler.identity]}" for m in self.alive)
        self.at(f"rebalanced {rebalanced:.2f} s after the join: {shares}")
        return joiner, rebalanced

    def drain(self) -> None:
        """Wait until the living members reached the end of every partition."""
        ends = {p: self.cluster.latest_offset(self.topic, p) for p in range(self.n_partitions)}

        def drained() -> bool:
            for p, end in ends.items():
                holder = next(
                    (m for m in self.alive if (self.topic, p) in m.consumer.claims()), None
                )
                if holder is None:
                    return False
                position = holder.consumer.position(self.topic, p)  # None: nothing read yet
                if (-1 if position is None else position) < end - 1:
                    return False
            return True

        _wait(drained, 30)
        self.at("the survivors reached the end of every partition")

    def close(self) -> list[dict[str, Any]]:
        """Stop every member and the observer; return the members' rows, taken before."""
        self.done.set()
        rows = [m.row() for m in self.members]
        for m in self.members:
            m.close()
        self.observer.close()
        return rows


def _produce(
    cluster: Cluster, topic: str, n_records: int, n_keys: int, heartbeat: float, futures: list[Any]
) -> threading.Thread:
    """Produce ``n_records`` keyed records in 20 chunks over 5·HB, in a thread (still flowing
    when the new member joins); each send's future is appended to ``futures``."""

    def produce() -> None:
        with Producer(cluster, linger_ms=2) as producer:
            chunks = 20
            for c in range(chunks):
                for i in range(c * n_records // chunks, (c + 1) * n_records // chunks):
                    futures.append(
                        producer.send(
                            topic, f"event-{i}".encode(), key=f"user-{i % n_keys}".encode()
                        )
                    )
                time.sleep(5 * heartbeat / chunks)

    thread = threading.Thread(target=produce, name="demo-producer", daemon=True)
    thread.start()
    return thread


def _count(members: list[_Member], n_partitions: int) -> tuple[Counter[int], int]:
    """How many times each produced record was handled, and how many were handled from a
    partition other than the one its key maps to."""
    seen: Counter[int] = Counter()
    misplaced = 0
    expected = Murmur2Partitioner()
    for m in members:
        for message in m.values:
            if message.value is None:
                continue  # the demo produces no tombstones (one would count as lost)
            seen[int(message.value.removeprefix(b"event-"))] += 1
            if expected(message.key, n_partitions) != message.partition:
                misplaced += 1
    return seen, misplaced


def run_demo(
    cluster: Cluster,
    n_records: int,
    n_partitions: int,
    n_keys: int,
    say: Callable[[str], None] = print,
    *,
    consumers: int = 3,
    heartbeat: float = 1.0,
    seed: int | None = None,
    topic: str = DEMO_TOPIC,
    group: str = DEMO_GROUP,
) -> dict[str, Any]:
    """Produce to a new ``topic``, consume with ``group``, kill a member, return the tally.

    ``topic`` must not exist yet (nothing is deleted: on a shared cluster it may be someone's).
    """
    rng = random.Random(seed)
    cluster.create_topic(topic, n_partitions)
    say(
        f"created topic {topic!r} with {n_partitions} partitions; group {group!r} of "
        f"{consumers} consumers, heartbeat every {heartbeat:g} s"
    )
    run = _Group(cluster, topic, group, n_partitions, heartbeat, say, consumers)
    started = time.perf_counter()
    futures: list[Any] = []
    try:
        run.wait(lambda: run.fair(run.members))
        run.at(f"every partition owned, each member its share; producing {n_records} records")
        producer_thread = _produce(cluster, topic, n_records, n_keys, heartbeat, futures)
        time.sleep(rng.uniform(0.3, 0.8) * heartbeat)
        victim, failover = run.kill_one(rng)
        joiner, rebalanced = run.join_one(f"c{consumers}")
        producer_thread.join(60)
        produce_s = time.perf_counter() - started
        run.drain()
    finally:
        rows = run.close()

    seen, misplaced = _count(run.members, n_partitions)
    acknowledged = {i for i, f in enumerate(futures) if f.exception() is None}
    tally = {
        "topic": topic,
        "group": group,
        "produced": n_records,
        "acknowledged": len(acknowledged),
        "handled": len(seen),
        "lost": len(acknowledged - set(seen)),
        "repeated": sum(c - 1 for c in seen.values() if c > 1),
        "misplaced": misplaced,
        "failover_seconds": round(failover, 3),
        "rebalance_seconds": round(rebalanced, 3),
        "heartbeat_seconds": heartbeat,
        "killed": victim.name,
        "joined": joiner.name,
        "seconds": round(time.perf_counter() - started, 2),
        "produce_seconds": round(produce_s, 2),
        "members": rows,
    }
    say(
        "tally: {produced} produced, {handled} handled, {lost} lost, {repeated} repeated "
        "(handled again after the kill: at least once), {misplaced} on the wrong partition".format(
            **tally
        )
    )
    return tally


def _wait(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the demo did not get there within {timeout:.0f} s")
        time.sleep(0.02)
