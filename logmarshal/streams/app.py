"""The runner: a topology's tasks, each one claim through Marshal.

Task p of sub-topology i is partition p of every source topic of that sub-topology, claimed
as one unit under the coordination key ``<application_id>.task.<i>/p`` (PROTOCOL.md,
"Tasks"): one :class:`~logmarshal.Consumer` claims tasks (``tasks=``), reads their source
partitions under the claim, and heartbeats every source's position in one record; the group's
target moves a task like a partition. A task is created (its stores restored from their
changelogs, its sources moved to where the restored state ends) when it is assigned, and
dropped when it is revoked. One processing thread (the caller's, in :meth:`App.run`):
records of a task must be processed in order and the stores are not thread-safe, and the
embedded cluster's I/O is already off this thread in the consumer's fetchers.

Each polled batch goes through its task as one batch (:meth:`Task.process_batch`); store
writes stay in the stores' write-behind caches until the commit. Commit order, every
``commit_interval`` seconds or when a processor asks: sinks flushed, then changelogs
written (the caches flushed into them, one record per changed key), then the inputs
committed to the consumer (which heartbeats them).
"""

from __future__ import annotations

import fcntl
import functools
import itertools
import logging
import operator
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from storage import InvalidConfig, InvalidTopicName, validate_topic_name

from .._member_args import check_member_args
from ..cluster import Cluster, Message
from ..consumer import Consumer
from ..consumer.handler import dead_letter_retrying
from ..errors import ClosedError
from ..marshaler import Marshaler
from ..producer import Producer
from ..retry import HandlerFailed, RetryPolicy
from .stores import InMemoryStore, KeyValueStore, StoreDamaged, open_store
from .task import Fenced, RecordNotAtomic, Task, changelog_topic
from .topology import SubTopology, Topology, TopologyError

__all__ = ["CHANGELOG_CONFIG", "App", "task_name"]

log = logging.getLogger(__name__)

Key = tuple[str, int]

#: a message's (topic, partition), at C speed
_TOPIC_PARTITION = operator.itemgetter(0, 1)


#: how changelog topics are created: compacted, and never a record younger than an hour
#: superseding an older one: a stale or cut-short commit's record is rewritten by the task's
#: next owner when it restores and commits, and until then the valid record it supersedes
#: must survive the cleaner (``tests/logmarshal/streams/test_fence.py``, the compaction tests)
CHANGELOG_CONFIG = (("cleanup.policy", "compact"), ("min.compaction.lag.ms", str(3_600_000)))


#: consumer settings an App makes itself: a ``consumer_options`` entry may not name them
_APP_CONSUMER_OPTIONS = frozenset({"mode", "tasks", "on_assigned", "on_revoked", "topics"})
#: after a task's set-up failed in on_assigned, run() tries it again after this (s), then
#: after twice the last wait, up to _SET_UP_RETRY_MAX
_SET_UP_RETRY = 1.0
_SET_UP_RETRY_MAX = 30.0


def _check_options(commit_interval: object, consumer_options: dict[str, Any] | None) -> None:
    if (
        isinstance(commit_interval, bool)
        or not isinstance(commit_interval, int | float)
        or not 0 <= commit_interval < float("inf")
    ):
        raise ValueError(f"commit_interval must be seconds (>= 0), got {commit_interval!r}")
    if consumer_options is None:
        return
    if not isinstance(consumer_options, dict):
        raise TypeError(f"consumer_options must be a dict, got {consumer_options!r}")
    taken = sorted(_APP_CONSUMER_OPTIONS.intersection(consumer_options))
    if taken:
        raise ValueError(
            f"consumer_options may not set {', '.join(taken)}: the App sets them itself"
        )


def task_name(application_id: str, sub: SubTopology) -> str:
    """The coordination topic of a sub-topology's tasks: a name in ``__marshal`` only."""
    return f"{application_id}.task.{sub.index}"


class App:
    """Runs ``topology`` as member ``client_id`` of group ``application_id``.

    ``state_dir``: where persistent (sqlite, rocksdb) stores live, one file (a directory
    for rocksdb) per task and store.
    ``retry``: a record whose processing raises is retried per the policy, then
    dead-lettered, or the app stops (the default: one attempt, no dead-letter topic). With
    retries or a dead-letter topic, each record is atomic: what a failed attempt wrote to
    the stores is undone and its sink writes are dropped before the next attempt or the
    dead-lettering (a processor's own fields are not: keep state in stores).
    """

    def __init__(
        self,
        cluster: Cluster,
        application_id: str,
        topology: Topology,
        *,
        client_id: str | None = None,
        heartbeat_interval: float = 1.0,
        state_dir: str | os.PathLike[str] = "streams-state",
        commit_interval: float = 0.5,
        retry: RetryPolicy | None = None,
        marshaler: Marshaler | None = None,
        consumer_options: dict[str, Any] | None = None,
    ) -> None:
        # everything checked before a topic is created (a refused App left its changelogs)
        if not isinstance(topology, Topology):
            raise TypeError(f"topology must be a Topology, got {topology!r}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy or None, got {retry!r}")
        if marshaler is None:
            member = client_id or f"{application_id}-{os.getpid()}"
            check_member_args(cluster, member, application_id, heartbeat_interval)
        elif not isinstance(marshaler, Marshaler):
            raise TypeError(f"marshaler must be a Marshaler or None, got {marshaler!r}")
        elif marshaler.group_id != application_id:
            raise ValueError(
                f"the marshaler is of group {marshaler.group_id!r}, the App's application_id "
                f"is {application_id!r}: they must be the same"
            )
        self.cluster = cluster
        self.application_id = application_id
        self.topology = topology
        self.state_dir = os.fspath(state_dir)
        _check_options(commit_interval, consumer_options)
        self.commit_interval = float(commit_interval)
        self._check_state_dir()
        self.retry = retry if retry is not None else RetryPolicy(max_attempts=1)
        self._rng = random.Random()
        # the application's own topics: their names, and the sources, checked before the
        # first is made (a refused App left a changelog or a repartition topic behind)
        existing = set(cluster.topics())  # (read once: nothing is made before the checks end)
        own = self._check_own_topics(existing)
        topology.check_sources(cluster, own)
        repartition = self._planned_repartition_topics(existing)
        self._subs = topology.check_copartitioned(cluster, own, repartition)
        changelogs = self._planned_changelogs(existing, repartition)
        self._create_internal_topics(repartition, changelogs)
        #: task name -> its sub-topology; source topic -> its task name
        self._sub_of_task = {task_name(application_id, sub): sub for sub in self._subs}
        self._task_of_topic = {
            topic: name for name, sub in self._sub_of_task.items() for topic in sub.source_topics
        }
        self._owns_marshaler = marshaler is None
        self.marshaler = marshaler or Marshaler(
            cluster,
            client_id or f"{application_id}-{os.getpid()}",
            application_id,
            heartbeat_interval,
        )
        #: sinks' records: sent with ``send_nowait`` (no per-record Delivery; a failed one
        #: makes the next flush raise), flushed at every commit before the changelogs
        self.producer = Producer(cluster, linger_ms=2.0)
        #: a flush of the sinks failed: their records since the last commit may be lost, so
        #: no later commit may commit the inputs behind them (they are processed again by
        #: whoever holds the tasks next: sinks stay at-least-once)
        self._sink_failure: BaseException | None = None
        #: by task key (task name, partition)
        self.tasks: dict[Key, Task] = {}
        #: per task key: its directory's lock (fd), or its private directory (locked elsewhere)
        self._task_dirs: dict[Key, tuple[int | None, str | None]] = {}
        self._uncommitted: dict[Key, list[Message]] = {}
        #: tasks whose processing raised out of the runner (HandlerFailed, an interrupt, a
        #: failing punctuator): their stores may hold part of a record's writes, so nothing
        #: of theirs since their last commit is committed (dropped at the next commit); the
        #: next holder of the claim processes those records again, from the last commit
        self._broken: set[Key] = set()
        #: claimed tasks whose set-up in on_assigned failed (a restore that timed out, a
        #: store that would not open): (when run() tries it again, the wait after that).
        #: Left to the first record, an idle task stayed claimed and not set up, its
        #: wall-clock punctuators never ran, and nothing said so
        self._set_up_later: dict[Key, tuple[float, float]] = {}
        #: the consumer's ``batch_size`` (its default when not given): the most one poll takes
        self._poll_batch = int(
            (consumer_options or {}).get("batch_size", Consumer.DEFAULT_CONFIG["batch_size"])
        )
        self._stop = threading.Event()
        self._closed = False
        self._running = threading.Event()
        self._run_exited = threading.Event()
        try:
            self.consumer = Consumer(
                self.marshaler,
                (),
                tasks={name: sub.source_topics for name, sub in self._sub_of_task.items()},
                mode="alo",
                on_assigned=self._assigned,
                on_revoked=self._revoked,
                **(consumer_options or {}),
            )
        except BaseException:
            # (a consumer option refused: the producer's and the marshaler's threads must
            # not outlive an App that was never made)
            self.producer.close()
            if self._owns_marshaler:
                self.marshaler.close()
            raise

    # -- setup ----------------------------------------------------------------------------

    def _check_state_dir(self) -> None:
        """With persistent stores, ``state_dir`` must hold directories: said here, not by
        the first task's set-up failing inside the consumer's assignment."""
        if all(spec.kind == "memory" for spec in self.topology.stores.values()):
            return
        base = os.path.join(self.state_dir, self.application_id)
        try:
            os.makedirs(base, exist_ok=True)
        except OSError as exc:
            raise ValueError(
                f"state_dir {self.state_dir!r}: cannot make {base!r} for the persistent "
                f"stores' files: {exc}"
            ) from exc
        if not os.access(base, os.W_OK | os.X_OK):
            raise ValueError(
                f"state_dir {self.state_dir!r}: {base!r} is not writable: the persistent "
                "stores' files go there"
            )

    def _check_own_topics(self, existing: set[str]) -> frozenset[str]:
        """The application's own topics, which no pattern source matches: the changelogs of
        every store (their names checked with the repartition topics': a store named ``b
        c`` was refused only by its changelog's creation), and any changelog or repartition
        topic of an earlier topology of this application (a store renamed since)."""
        changelogs = {s: changelog_topic(self.application_id, s) for s in self.topology.stores}
        named = [(f"store {s!r}: its changelog topic", t) for s, t in sorted(changelogs.items())]
        named += [("repartition topic", t) for t in sorted(self.topology.internal_topics)]
        for what, topic in named:
            try:
                validate_topic_name(topic)
            except InvalidTopicName as exc:
                raise TopologyError(f"{what}: {exc}") from None
        prefix = f"{self.application_id}-"
        earlier = {
            t
            for t in existing
            if t.startswith(prefix) and t.endswith(("-changelog", "-repartition"))
        }
        return frozenset(changelogs.values()) | earlier

    def _planned_repartition_topics(self, existing: set[str]) -> dict[str, int]:
        """The DSL repartition topics to make, by partition count: as many as the widest
        source topic."""
        missing = sorted(self.topology.internal_topics - existing)
        if not missing:
            return {}
        widths = []
        for node in self.topology.sources.values():
            for t in node.topics:
                if t in existing and t not in self.topology.internal_topics:
                    widths.append(self.cluster.partitions(t))
        return dict.fromkeys(missing, max(widths, default=1))

    def _planned_changelogs(
        self, existing: set[str], repartition: dict[str, int]
    ) -> dict[str, int]:
        """The changelogs to make, by partition count (each its task's lead topic's, maybe a
        repartition topic not made yet); an existing one of another count is refused."""
        wanted: dict[str, int] = {}
        for sub in self._subs:
            n = repartition.get(sub.lead_topic) or self.cluster.partitions(sub.lead_topic)
            for store in sub.stores:
                topic = changelog_topic(self.application_id, store)
                if topic not in existing:
                    wanted[topic] = n
                elif self.cluster.partitions(topic) != n:
                    raise TopologyError(
                        f"changelog {topic} has {self.cluster.partitions(topic)} partitions, "
                        f"its task's source {sub.lead_topic} has {n}"
                    )
        return wanted

    def _create_internal_topics(
        self, repartition: dict[str, int], changelogs: dict[str, int]
    ) -> None:
        """Make them, once everything was checked (a refused App makes no topic)."""
        for topic, n in repartition.items():
            self.cluster.create_topic(topic, n)
        for topic, n in changelogs.items():
            try:
                self.cluster.create_topic(topic, n, dict(CHANGELOG_CONFIG))
            except InvalidConfig as exc:  # no broker-side compaction on this branch yet
                log.info(
                    "changelog %s: compaction not accepted (%s); created uncompacted", topic, exc
                )
                self.cluster.create_topic(topic, n)

    def _task_dir(self, key: Key, sub: SubTopology) -> str | None:
        """The directory of a task's persistent stores, locked (flock) for this task object
        alone: another live process (a frozen former owner, or an older instance of the same
        client id) may still have the task's files open and commit its stale writes into
        them. If the directory is locked, a private one is used instead (restored from the
        changelogs, deleted when the task is dropped, and locked too: one whose lock is free
        was left by a process that died, and is swept here)."""
        if all(self.topology.stores[s].kind == "memory" for s in sub.stores):
            return None
        partition = key[1]
        base = os.path.join(self.state_dir, self.application_id)
        path = os.path.join(base, f"{sub.index}_{partition}")
        os.makedirs(path, exist_ok=True)
        _sweep_private(base)
        fd = os.open(os.path.join(path, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            fd, private = _private_dir(base, f"{sub.index}_{partition}")
            log.warning(
                "task %s_%d: %s is locked by another process (or App); restoring into %s",
                sub.index,
                partition,
                path,
                private,
            )
            self._task_dirs[key] = (fd, private)
            return private
        self._task_dirs[key] = (fd, None)
        return path

    def _release_task_dir(self, key: Key) -> None:
        fd, private = self._task_dirs.pop(key, (None, None))
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)  # (before its lock goes)
        if fd is not None:
            os.close(fd)  # releases the flock

    def _make_store(self, name: str, directory: str | None) -> KeyValueStore:
        spec = self.topology.stores[name]
        if spec.kind == "memory" or directory is None:
            return InMemoryStore(name)
        return open_store(spec.kind, name, os.path.join(directory, f"{name}.{spec.kind}"))

    # -- assignment -----------------------------------------------------------------------

    @property
    def tasks_not_set_up(self) -> list[Key]:
        """Claimed tasks whose set-up failed, tried again by :meth:`run` (a record of one
        sets it up at once, or stops the App if that fails)."""
        return sorted(self._set_up_later)

    def _assigned(self, keys: list[Key]) -> None:
        """The consumer's callback: each task set up, one's failure tried again later by
        :meth:`run` (:meth:`_set_up_again`) without keeping the others from theirs."""
        for key in keys:
            try:
                self._set_up(key)
            except Exception as exc:
                self._set_up_failed(key, exc, _SET_UP_RETRY)

    def _set_up_failed(self, key: Key, exc: Exception, wait: float) -> None:
        log.error(
            "task %s/%d: its set-up failed (%s: %s); tried again in %.0f s",
            *key,
            type(exc).__name__,
            exc,
            wait,
        )
        self._set_up_later[key] = (time.monotonic() + wait, min(2 * wait, _SET_UP_RETRY_MAX))

    def _set_up_again(self) -> None:
        """Set up the claimed tasks whose set-up failed, when their wait is over."""
        now = time.monotonic()
        for key, (when, wait) in list(self._set_up_later.items()):
            if key in self.tasks or key not in self.consumer.claims():
                del self._set_up_later[key]  # (set up by a record, or no longer ours)
            elif now >= when:
                try:
                    self._set_up(key)
                except Exception as exc:
                    self._set_up_failed(key, exc, wait)
                else:
                    del self._set_up_later[key]
                    log.info("task %s/%d: set up on a later try", *key)

    def _set_up(self, key: Key) -> None:
        """A task for the claim ``key``: its stores opened and restored, its inputs
        resumed where its state ends (nothing if it is set up or no longer held)."""
        name, p = key
        sub = self._sub_of_task.get(name)
        if sub is None or key in self.tasks:
            return
        epoch = self.consumer.epoch(name, p)
        if epoch is None:
            log.info("task %s/%d assigned but no longer held: not set up", name, p)
            return
        self._release_task_dir(key)  # a failed set-up's, if any
        stores: dict[str, KeyValueStore] = {}
        try:
            directory = self._task_dir(key, sub)
            for s in sub.stores:
                stores[s] = self._make_store(s, directory)
        except BaseException:
            for store in stores.values():  # (a store that cannot open: the others
                store.close()  # must not stay open, nor the directory locked)
            self._release_task_dir(key)
            raise
        task = Task(
            self.application_id,
            self.topology,
            sub,
            p,
            stores,
            self._send,
            self.cluster.partitions,
            self._now_ms,
            epoch=epoch,
            atomic_records=self.retry.max_attempts > 1 or self.retry.dead_letter_topic is not None,
        )
        started = time.monotonic()
        try:
            resume = task.restore(self.cluster)  # and fences the changelogs with epoch
        except Fenced as exc:
            log.warning("task %s not set up: %s", task.task_id, exc)
            task.close()
            self._release_task_dir(key)
            return
        except BaseException:
            task.close()  # its files must not stay open (and locked) in this process
            self._release_task_dir(key)
            raise
        self.tasks[key] = task
        self._uncommitted[key] = []
        starts = {}
        for topic in sub.source_topics:
            held = self.consumer.position(topic, p)
            want = resume.get(topic)
            if want is not None and (held is None or held + 1 < want):
                # the state reflects input the heartbeats do not (a crash between the
                # changelog and the heartbeat): resume where the state ends
                self.consumer.seek(topic, p, want)
                held = want - 1
            starts[topic] = None if held is None else held + 1
        log.info(
            "task %s restored in %.3fs, resuming at %s",
            task.task_id,
            time.monotonic() - started,
            starts,
        )

    def _revoked(self, keys: list[Key]) -> None:
        """The consumer's callback: the claims are gone (a later claim of one resumes from
        its committed positions, so a broken task's key may run again)."""
        self._broken.difference_update(keys)
        for key in keys:
            self._set_up_later.pop(key, None)
        self._drop(keys)

    def _drop(self, keys: list[Key]) -> None:
        """Close tasks without committing what they did since their last commit."""
        for key in keys:
            task = self.tasks.pop(key, None)
            self._uncommitted.pop(key, None)
            if task is not None:
                task.close()
            self._release_task_dir(key)

    # -- processing -----------------------------------------------------------------------

    def _now_ms(self) -> int:
        return round(self.marshaler.clock.time() * 1000)

    def _send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        ts: int,
        headers: tuple,
    ) -> None:
        self.producer.send_nowait(
            topic, value, key, None if partition < 0 else partition, headers or None, ts
        )

    def process(self, message: Message) -> None:
        self.process_batch((message,))

    def process_batch(self, messages: Sequence[Message]) -> None:
        """Process polled messages, each run of one partition's as one batch of its task
        (:meth:`Task.process_batch`): a failing record is retried per the policy, then
        dead-lettered or raised (:class:`HandlerFailed`); a raised one stops the App (its
        task's state since its last commit is never committed: :meth:`_check_running`)."""
        self._check_running()
        # a poll's batch is one partition's: one run, found without a Python step per message
        for (topic, partition), run in itertools.groupby(messages, _TOPIC_PARTITION):
            self._process_run((self._task_of_topic[topic], partition), list(run))

    def _check_running(self) -> None:
        """A task whose processing raised stops the App, as an uncaught exception stops a
        Kafka Streams thread: it keeps its claims and commits nothing of the task since its
        last commit, so processing on would leave that task's records polled and never
        processed while it holds them. Close the App; another (a restart) redoes them."""
        if self._broken:
            names = ", ".join(sorted(f"{name}/{p}" for name, p in self._broken))
            raise ClosedError(
                f"{self}: the processing of task(s) {names} failed; this App processes no "
                "more: close it and start another (it processes them again from their last "
                "commit)"
            )

    def _task_for(self, key: Key) -> Task | None:
        task = self.tasks.get(key)
        if task is None:
            if key not in self.consumer.claims():
                return None  # revoked meanwhile: whoever holds it now processes it
            # handed out before on_assigned was delivered (or its set-up failed there):
            # set the task up now
            try:
                self._set_up(key)
            except BaseException:
                # its records in hand are not processed: processing on would commit its
                # position past them (a restart processes them from its last commit)
                self._broken.add(key)
                raise
            self._set_up_later.pop(key, None)
            task = self.tasks.get(key)  # None: fenced meanwhile, not ours to process
        return task

    def _process_run(self, key: Key, messages: Sequence[Message]) -> None:
        """Messages of one partition, in offset order, through their task."""
        task = self._task_for(key)
        if task is None:
            return
        uncommitted = self._uncommitted[key]
        topic = messages[0].topic
        reflected = task.positions.get(topic, 0)
        if messages[0].offset < reflected:
            # the state already reflects these (a stale batch from before the seek to where
            # the restored state ends): processing them again would count them twice
            uncommitted.extend(m for m in messages if m.offset < reflected)
            messages = [m for m in messages if m.offset >= reflected]
        try:
            task.process_batch(messages, functools.partial(self._failed, task))
        except StoreDamaged as exc:
            self._restore_damaged(key, exc)
            return
        except BaseException:
            # the failing record may have written part of its updates to the stores (a
            # count of its first words): committing the stores now would make its retry,
            # by whoever processes it next, apply those twice
            self._broken.add(key)
            raise
        uncommitted.extend(messages)

    def _restore_damaged(self, key: Key, damaged: StoreDamaged) -> None:
        """A store of the task turned out damaged while it processed (its local files): as
        Kafka Streams does for a corrupted task, drop the task without committing (its
        files are deleted as it closes), set it up again from its changelogs, and move its
        inputs back to where the restored state ends, so that everything handed out since
        is processed again (the rest of the batch in hand included). If that fails, the App
        stops as for a failed record."""
        name, p = key
        log.error("task %s/%d: %s; restoring it from its changelogs", name, p, damaged)
        processed = self._uncommitted.get(key, [])
        try:
            try:
                self._drop([key])
            except Exception:  # (a damaged file's rollback): its files are deleted all the same
                log.exception("task %s/%d: its close failed", name, p)
            self._set_up(key)
            task = self.tasks.get(key)
            if task is None:
                return  # no longer ours (fenced, or lost meanwhile): its next holder redoes it
            # what the restored state reflects is committed (a commit whose changelog write
            # landed before its local checkpoint met the damage): handed out and never
            # committed, it would hold the position back for good after the seek past it
            reflected = [m for m in processed if m.offset < task.positions.get(m.topic, 0)]
            if reflected:
                self.consumer.commit(*reflected)
            for topic in self._sub_of_task[name].source_topics:
                held = self.consumer.position(topic, p)
                if held is not None:
                    self.consumer.seek(topic, p, max(task.positions.get(topic, 0), held + 1))
        except BaseException as exc:
            self._broken.add(key)
            raise exc from damaged

    def _failed(self, task: Task, message: Message, exc: Exception) -> None:
        """A record's processing raised: retry it per the policy, then dead-letter it (its
        position moves past it) or raise :class:`HandlerFailed`. A damaged store is not the
        record's fault: raised at once, never retried or dead-lettered (the task is restored:
        :meth:`_restore_damaged`)."""
        if isinstance(exc, StoreDamaged | RecordNotAtomic):
            raise exc
        attempts = 1
        while attempts < self.retry.max_attempts:
            time.sleep(self.retry.delay(attempts, self._rng))
            attempts += 1
            try:
                task.process_batch((message,), punctuate=False)
            except (StoreDamaged, RecordNotAtomic):
                raise
            except Exception as again:
                exc = again
                continue
            # stream time moves once it succeeded, outside the try: a punctuator's failure
            # is not the record's (retrying it again would process it twice)
            task.advance_stream_time(message.timestamp)
            return
        if self.retry.dead_letter_topic is None:
            raise HandlerFailed(message, attempts, exc) from exc
        self._dead_letter(message, exc)
        task.positions[message.topic] = message.offset + 1

    def _dead_letter(self, message: Message, exc: BaseException) -> None:
        """Write ``message`` to the dead-letter topic; a transient failure (a broker
        restarting) is retried until :meth:`stop`, as ``Consumer.run`` does (it stopped the
        app), then raised; a refusal is raised."""
        topic = self.retry.dead_letter_topic
        assert topic is not None
        failure = dead_letter_retrying(
            self.cluster,
            message,
            exc,
            topic,
            self._now_ms,
            self.retry,
            self._rng,
            self._stop.wait,
            str(self),
        )
        if failure is not None:
            raise failure

    def commit(self) -> None:
        """Sinks flushed, then changelogs, then the inputs committed (heartbeated)."""
        if self._sink_failure is not None:
            raise RuntimeError(
                "a sink write failed earlier: nothing more is committed"
            ) from self._sink_failure
        try:
            self.producer.flush()  # a failed sink write raises before anything is committed
        except BaseException as exc:
            self._sink_failure = exc
            raise
        held = set(self.consumer.claims())
        fenced = self.consumer.fenced
        for key in self._broken.intersection(self.tasks):
            log.warning(
                "task %s: its processing failed; its state and inputs since its last commit "
                "are not committed (processed again by the claim's next holder)",
                self.tasks[key].task_id,
            )
            self._drop([key])
        for key, task in list(self.tasks.items()):
            if fenced or key not in held or self.consumer.epoch(*key) != task.epoch:
                # lost meanwhile (the log gave it to another member; or lost and won again,
                # under a new epoch: a new task must restore what happened in between). Not
                # writing is only an optimisation: a commit this stale would not be valid
                # anyway, the new owner's fence marker invalidates it for every restore.
                log.warning(
                    "task %s no longer held under epoch %d: its uncommitted state is dropped",
                    task.task_id,
                    task.epoch,
                )
                self._revoked([key])
                continue
            try:
                task.write_changelogs(self.cluster)
            except Fenced as exc:
                log.warning(
                    "task %s fenced: %s; its uncommitted state is dropped", task.task_id, exc
                )
                self._revoked([key])
                continue
            except StoreDamaged as exc:  # (met by the flush or the local checkpoint)
                if task.commit_failed:
                    # after a marker of this commit was written: as any commit failed part way
                    # (set up again under the same claim, a take-back of its own epoch's
                    # commit would not be durable: its next crash between markers revived it)
                    self._broken.add(key)
                    raise
                self._restore_damaged(key, exc)
                continue
            except BaseException:
                # some of its stores may have this commit and others not: only a restore
                # tells which commit they all have, so the task commits nothing more here
                # (a restart restores it and processes its input from there)
                self._broken.add(key)
                raise
            task.commit_requested = False
        for messages in self._uncommitted.values():
            if messages:
                self.consumer.commit(*messages)  # one call (one lock) per task
                messages.clear()

    def run(self, *, max_records: int | None = None, poll_timeout: float = 0.1) -> int:
        """Process until :meth:`close` (from another thread) or ``max_records``; returns
        at once if its consumer is fenced (it never processes again: restart the app, a new
        instance), committing nothing more."""
        self._check_running()
        handled = 0
        next_commit = time.monotonic() + self.commit_interval
        self._run_exited.clear()
        self._running.set()
        try:
            while not self._stop.is_set() and (max_records is None or handled < max_records):
                # no larger batches than the consumer's own: max_records only stops the run
                limit = None if max_records is None else max_records - handled
                if limit is not None and limit >= self._poll_batch:
                    limit = None
                batch = self.consumer.poll(poll_timeout, max_records=limit)
                if not batch and self.consumer.fenced:
                    log.error("%s: the consumer is fenced: run() returns (restart it)", self)
                    return handled
                if batch:
                    self.process_batch(batch)
                    handled += len(batch)
                if self._set_up_later:
                    self._set_up_again()
                for key, task in list(self.tasks.items()):
                    try:
                        task.punctuate_wall_clock()
                    except StoreDamaged as exc:
                        self._restore_damaged(key, exc)
                    except BaseException:
                        self._broken.add(key)  # (its writes may be half done: see above)
                        raise
                if time.monotonic() >= next_commit or any(
                    t.commit_requested for t in self.tasks.values()
                ):
                    self.commit()
                    next_commit = time.monotonic() + self.commit_interval
                if self.consumer.closed:
                    if self.consumer.failure is not None:  # not an orderly close: say so
                        raise self.consumer.failure
                    break
            self.commit()
        except BaseException:
            self._stop.set()
            raise
        finally:
            self._running.clear()
            self._run_exited.set()
        return handled

    def stop(self) -> None:
        """Make :meth:`run` return after its current batch (safe from a signal handler)."""
        self._stop.set()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._running.is_set():
            # run() is in another thread: the stores are its alone until it has returned
            # (after its own final commit); committing under it could write half a record
            self._run_exited.wait(30)
        try:
            self.commit()
        except Exception:
            log.exception("final commit failed; the changelog and heartbeats stay consistent")
        self.consumer.close()
        self.producer.close()
        for task in self.tasks.values():
            task.close()
        self.tasks.clear()
        for key in list(self._task_dirs):
            self._release_task_dir(key)
        if self._owns_marshaler:
            self.marshaler.close()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: a private task directory's name: ``<sub>_<partition>`` + this + a random suffix
PRIVATE = ".private-"
#: ... made first as ``.<sub>_<partition>`` + this + the same suffix, renamed once locked
_HALF_MADE = ".new-"
#: a half-made private directory this old (s) is no maker's any more (a maker renames it
#: within a moment of making it)
_HALF_MADE_AGE = 60.0
#: times a private directory is made before its making fails (a sweep took each one)
_MAKE_ATTEMPTS = 3


def _private_dir(base: str, task: str) -> tuple[int, str]:
    """A new private directory for ``task`` under ``base``, and the descriptor holding its
    lock: made under another name and renamed once locked, so that a directory of the
    private name is locked from the moment it exists, for as long as its process lives.
    Made again if a sweep took the half-made one (this process stalled past
    ``_HALF_MADE_AGE`` before locking it: SIGSTOP, swapping)."""
    for _ in range(_MAKE_ATTEMPTS - 1):
        try:
            return _make_private_dir(base, task)
        except FileNotFoundError:
            if not os.path.isdir(base):
                raise
            log.warning("%s: a half-made private directory was swept; making another", base)
    return _make_private_dir(base, task)


def _make_private_dir(base: str, task: str) -> tuple[int, str]:
    made = tempfile.mkdtemp(prefix=f".{task}{_HALF_MADE}", dir=base)
    fd = -1
    try:
        fd = os.open(os.path.join(made, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (new: nobody else knows it yet)
        private = os.path.join(base, task + PRIVATE + made.rsplit(_HALF_MADE, 1)[1])
        os.rename(made, private)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        shutil.rmtree(made, ignore_errors=True)
        raise
    return fd, private


def _sweep_private(base: str) -> None:
    """Delete the private task directories under ``base`` whose lock is free: their
    process died without dropping its tasks (SIGKILL); a live one holds its lock. A half-made
    one (``.<task>.new-*``: its process died before the rename) goes once its lock is free,
    or missing, and it is older than ``_HALF_MADE_AGE``: younger, its maker may be between
    making it and locking it."""
    found: list[tuple[str, bool]] = []  # (path, half made)
    with os.scandir(base) as entries:
        for e in entries:
            half_made = e.name.startswith(".") and _HALF_MADE in e.name
            if (half_made or PRIVATE in e.name) and e.is_dir():
                found.append((e.path, half_made))
    for path, half_made in found:
        if half_made:
            try:
                if time.time() - os.stat(path).st_mtime < _HALF_MADE_AGE:
                    continue
            except OSError:
                continue  # (renamed or gone meanwhile)
        try:
            fd = os.open(os.path.join(path, ".lock"), os.O_RDWR)
        except FileNotFoundError:
            if half_made:  # (killed before it had its lock file)
                log.info("deleting %s, half made by a process that died", path)
                shutil.rmtree(path, ignore_errors=True)
            continue  # (gone meanwhile, or of an older layout: left alone)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # in use (BlockingIOError), or a lock this file system refuses: kept
        else:
            log.info("deleting %s, left by a process that died", path)
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)
