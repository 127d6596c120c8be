"""A word-count member process for the SIGKILL and SIGSTOP tests:
``python -m tests.logmarshal.streams.member DATA_DIR|bootstrap=HOST:PORT CLIENT_ID STATE_DIR``.
Prints one line per commit: ``committed N`` with N the tasks it runs.

- ``LM_STALE_WRITER=1``: it writes every task's changelog before the runner checks that it
  still holds the task (a stall between that check and the write, made as wide as it gets).
- ``LM_FREEZE_AFTER=N`` as well: at its first commit with a dirty store after N commits that
  ran both tasks (the tests' sources have two partitions), it prints ``freezing`` and stops
  itself (SIGSTOP) right there, between the check and the write. Whoever thaws it (SIGCONT)
  gets a stale write for certain; stopped from outside, it sometimes woke where the runner
  first saw its tasks gone, and wrote nothing stale.
- ``LM_SOURCES=lines,more-lines``: it counts the words of several co-partitioned topics in
  one task (one claim, both topics' positions in its heartbeats).
- ``LM_STORE_KIND=rocksdb`` puts the counts in that engine (default: sqlite).
- ``LM_RESTORE_DELAY=S``: after reading a store's changelog to restore it, before fencing
  it, it prints ``restore-sleep`` and sleeps S seconds (a slow restore, made wide).
- ``LM_KILL_AT=after-changelog`` or ``mid-changelog`` (with ``LM_KILL_AFTER=N``, default 5):
  at its (N+1)-th changelog commit it prints ``killing`` and SIGKILLs itself, right after the
  commit's records (marker included) were written, before the local checkpoint and the input
  commit; or with the commit's data records written and its marker not (a commit cut short);
  or ``between-stores``: with ``LM_CHAINED=1``, right after store counts' marker of its
  (N+1)-th commit was written, before store sums' (the stores out of step).
- ``LM_CHAINED=1``: a second store, sums, adds up each word's running counts (it reads what
  the counts store computes: exact only if both are restored to one commit)."""

from __future__ import annotations

import os
import signal
import sys
import time

from logmarshal import EmbeddedCluster, connect
from logmarshal.streams import App, Processor, StoreSpec, Topology
from logmarshal.streams.serde import string_deserializer
from logmarshal.streams.task import Fenced


class CountEveryUpdate(Processor):
    """Counts words per task and forwards every new count as (word, [partition, count])."""

    delay = 0.0
    chained = False

    def init(self, context):
        super().init(context)
        self.store = context.get_state_store("counts")
        self.sums = context.get_state_store("sums") if self.chained else None

    def process(self, record):
        if self.delay:
            time.sleep(self.delay)
        for word in record.value.split():
            n = (self.store.get(word) or 0) + 1
            self.store.put(word, n)
            if self.sums is not None:
                self.sums.put(word, (self.sums.get(word) or 0) + n)
            self.context.forward(word, [self.context.partition, n])


def topology(
    delay: float = 0.0,
    sources: tuple[str, ...] = ("lines",),
    kind: str = "sqlite",
    chained: bool = False,
) -> Topology:
    """Word count over ``sources`` (co-partitioned: partition p of each is one task), its
    counts in a store of engine ``kind`` (and with ``chained`` the sums of the running
    counts in a second one)."""
    CountEveryUpdate.delay = delay
    CountEveryUpdate.chained = chained
    t = Topology()
    for topic in sources:
        t.add_source(topic, topic, value_deserializer=string_deserializer)
    t.add_processor("count", CountEveryUpdate, list(sources))
    t.add_state_store(StoreSpec("counts", kind), "count")
    if chained:
        t.add_state_store(StoreSpec("sums", kind), "count")
    t.add_sink("out", "counts-out", "count")
    return t


def _slow_restores(seconds: float) -> None:
    """Every store's restore sleeps ``seconds`` between its changelog read and its fence."""
    from logmarshal.streams import task_restore

    restore = task_restore._restore_store

    def slow(*args, **kwargs):
        found = restore(*args, **kwargs)
        print("restore-sleep", flush=True)
        time.sleep(seconds)
        return found

    task_restore._restore_store = slow


def _kill_at(where: str, after: int) -> None:
    """SIGKILL this process at the changelog write of commit ``after`` + 1 (``LM_KILL_AT``)."""
    from logmarshal.streams import task

    append = task.Task._append
    commits = 0

    def killing(self, cluster, name, records, durable):
        nonlocal commits
        # (the marker comes last, with the commit's records or, over the network, alone)
        if records and task.marker_of(records[-1].key) is task.COMMIT_KEY:
            commits += where != "between-stores" or name == "counts"
            if commits > after and (where != "between-stores" or name == "counts"):
                written = records if where != "mid-changelog" else records[:-1]
                if written:
                    append(self, cluster, name, written, durable)
                print(f"killing {where}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        return append(self, cluster, name, records, durable)

    task.Task._append = killing


def main() -> None:
    data_dir, client_id, state_dir = sys.argv[1:4]
    if os.environ.get("LM_KILL_AT"):
        _kill_at(os.environ["LM_KILL_AT"], int(os.environ.get("LM_KILL_AFTER", "5")))
    if os.environ.get("LM_RESTORE_DELAY"):
        _slow_restores(float(os.environ["LM_RESTORE_DELAY"]))
    if data_dir.startswith("bootstrap="):
        cluster = connect(bootstrap=data_dir.removeprefix("bootstrap="))
    else:
        cluster = EmbeddedCluster(data_dir, maintenance_interval=0)
    with cluster:
        sources = tuple(os.environ.get("LM_SOURCES", "lines").split(","))
        kind = os.environ.get("LM_STORE_KIND", "sqlite")
        app = App(
            cluster,
            "wc",
            topology(
                delay=0.0005,
                sources=sources,
                kind=kind,
                chained=os.environ.get("LM_CHAINED") == "1",
            ),
            client_id=client_id,
            heartbeat_interval=0.3,
            state_dir=state_dir,
            commit_interval=0.05,
        )
        original = app.commit
        freeze_after = int(os.environ.get("LM_FREEZE_AFTER", "0"))
        commits = 0
        frozen = False

        def commit() -> None:
            nonlocal commits, frozen
            if os.environ.get("LM_STALE_WRITER") == "1":
                app.producer.flush()
                tasks = list(app.tasks.values())
                dirty = any(s.dirty for t in tasks for s in t.stores.values())
                if freeze_after and commits >= freeze_after and dirty and not frozen:
                    frozen = True
                    print("freezing", flush=True)
                    os.kill(os.getpid(), signal.SIGSTOP)  # the test thaws it
                written = 0
                for task in tasks:
                    try:
                        written += task.write_changelogs(app.cluster)
                    except Fenced:
                        print(f"stale commit written by task {task.task_id}", flush=True)
                if frozen and written:
                    print(f"wrote {written} records after the freeze", flush=True)
            original()
            commits += len(app.tasks) == 2
            print(f"committed {len(app.tasks)}", flush=True)

        app.commit = commit  # type: ignore[method-assign]
        app.run()


if __name__ == "__main__":
    main()
