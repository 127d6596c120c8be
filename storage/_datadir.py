"""DataDir: the topics and partitions of one data directory, owned by one process at a time.

Layout::

    <path>/.lock                 flock'ed for as long as the DataDir is open
    <path>/topics.json           topic names, partition counts and configs (atomic rewrite)
    <path>/<topic>-<partition>/  one PartitionLog each
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import attrs

from storage._config import TopicConfig
from storage._errors import (
    DataDirLocked,
    InvalidConfig,
    InvalidTopicName,
    LimitExceeded,
    PolicyViolation,
    StorageError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from storage._files import fsync_dir
from storage._log import PartitionLog
from storage._segment import FileHandles
from storage._topics_meta import (
    MAX_META_BYTES,
    META_VERSION,
    check_partition_count,
    read_meta,
    validate_topic_name,
)

__all__ = ["DataDir", "PartitionInfo", "TopicInfo", "validate_topic_name", "wall_clock_ms"]

log = logging.getLogger(__name__)

_META_FILE = "topics.json"
_LOCK_FILE = ".lock"
#: written when the directory was closed cleanly (every partition flushed), removed on open:
#: Kafka's ``.kafka_cleanshutdown``. Damage found after a clean shutdown is no torn write
_CLEAN_FILE = ".clean-shutdown"
_PARTITION_DIR = re.compile(r"(.+)-([0-9]+)")  # fullmatch
#: a topic's partition count is refused above this (Kafka has no such limit; one request
#: must not be able to ask for tens of thousands of directories)
DEFAULT_MAX_PARTITIONS_PER_TOPIC = 4096
#: partitions a data directory may hold when no budget is given: they cost no descriptors
#: while idle (segment files are opened on demand, within the open-file budget), so this
#: bounds memory and directory count, not files
DEFAULT_MAX_PARTITIONS = 100_000


_FLUSHER_TICK_S = 0.1
#: Kafka's log.retention.check.interval.ms default (5 minutes)
DEFAULT_RETENTION_CHECK_INTERVAL_MS = 300_000


def wall_clock_ms() -> int:
    """The default clock: epoch milliseconds."""
    return time.time_ns() // 1_000_000


#: what :meth:`DataDir.delete_topic` renames a partition directory to before removing it
_DELETED_DIR = re.compile(r".+-[0-9]+\.[0-9a-f]{32}-delete")
#: the files a partition directory holds (segments and their indexes, a cleaner's swap or
#: cleaned file, the log start and the cleaner's checkpoint, the damaged bytes of a newest
#: segment kept after a clean shutdown (Segment.recover), a swap found damaged
#: (complete_swaps), and their temporary files)
_PARTITION_FILE = re.compile(
    r"[0-9]{20}\.(log|index|timeindex)(\.cleaned|\.[0-9]{20}\.swap)?"
    r"|(log-start-offset|cleaner-checkpoint)\.json(\.tmp)?"
    r"|[0-9]{20}\.log\.[0-9]+(-[0-9]+)?\.damaged(\.tmp)?"
    r"|[0-9]{20}\.log\.[0-9]{20}\.swap\.damaged"
)
#: besides topics and partitions, what a data directory holds
_OWN_FILES = frozenset({_META_FILE, f"{_META_FILE}.tmp", _LOCK_FILE})


def _partition_files(directory: Path) -> list[Path] | None:
    """The files of a partition directory, or None if it holds anything else (not ours)."""
    try:
        entries = list(directory.iterdir())
    except OSError:
        return None
    if any(not (_PARTITION_FILE.fullmatch(e.name) and e.is_file()) for e in entries):
        return None
    return entries


def _kept_because(directory: Path) -> str | None:
    """Why ``directory`` may not be removed: it holds records, or files that are not a
    partition's; None for a partition directory of ours with no records."""
    files = _partition_files(directory)
    if files is None:
        return "files that are not a partition's"
    records = (".log", ".swap", ".cleaned", ".damaged")
    if any(f.name.endswith(records) and f.stat().st_size for f in files):
        return "records"
    return None


def _check_ours(path: Path) -> None:
    """Warn about a directory that does not look like a data directory: no metadata and
    entries that are not partitions. It is opened all the same (its sweeps remove only what
    is shaped as ours: found by an attack on the CLI, ``--data-dir`` on a home folder removed
    its ``*-delete`` subfolders), but a mistyped path should be seen."""
    if (path / _META_FILE).exists():
        return
    for entry in path.iterdir():
        if entry.name in _OWN_FILES or entry.name.startswith("."):
            continue
        ours = (
            entry.is_dir()
            and (_PARTITION_DIR.fullmatch(entry.name) or _DELETED_DIR.fullmatch(entry.name))
            and _partition_files(entry) is not None
        ) or (entry.is_file() and entry.name.endswith((".json", ".json.tmp")))
        if not ours:
            log.warning(
                "%s has no %s and holds %r: it does not look like a logmarshal data "
                "directory (nothing in it that is not shaped as ours is touched)",
                path,
                _META_FILE,
                entry.name,
            )
            return


def _collision_key(name: str) -> str:
    # Kafka refuses topics differing only by '.' versus '_' (their metric names collide).
    return name.replace(".", "_")


@attrs.frozen
class PartitionInfo:
    """A snapshot of one partition's extent on disk."""

    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    segments: int


@attrs.frozen
class TopicInfo:
    """A snapshot of a topic: its config and every partition's extent."""

    name: str
    partitions: int
    config: TopicConfig
    partition_info: tuple[PartitionInfo, ...]


@attrs.define
class _Topic:
    config: TopicConfig
    logs: list[PartitionLog]


class DataDir:
    """All topics of a data directory; opening it takes an exclusive lock and runs recovery."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], int] | None = None,
        flush_interval_s: float = _FLUSHER_TICK_S,
        validate_records: bool = True,
        max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC,
        max_partitions: int | None = None,
        clean_interval_s: float = 15.0,
        retention_check_interval_ms: int = DEFAULT_RETENTION_CHECK_INTERVAL_MS,
        max_open_files: int | None = None,
    ) -> None:
        self.path = Path(path)
        #: the open-file budget: segment files open at once across all partitions
        #: (None: from ulimit -n, see storage._segment.default_file_budget)
        self.handles = FileHandles(max_open_files)
        self._validate_records = validate_records
        #: how often the maintenance thread runs the cleaner (Kafka's log.cleaner.backoff.ms;
        #: 0: only when clean() is called)
        self.clean_interval_s = clean_interval_s
        #: how often the same thread applies retention (Kafka's
        #: log.retention.check.interval.ms; 0: only when enforce_retention() is called)
        self.retention_check_interval_ms = retention_check_interval_ms
        #: bounds on what one call can create (INVALID_PARTITIONS / POLICY_VIOLATION)
        self.max_partitions_per_topic = max_partitions_per_topic
        self.max_partitions = DEFAULT_MAX_PARTITIONS if max_partitions is None else max_partitions
        self._clock: Callable[[], int] = clock if clock is not None else wall_clock_ms
        self._lock = threading.RLock()
        self._topics: dict[str, _Topic] = {}
        #: topics deleted whose directories may not all be gone (name -> partition count),
        #: kept in topics.json until they are: a crash mid-delete is finished at the next open
        self._deleting: dict[str, int] = {}
        #: each topic's partitions as of the last change, swapped whole under the lock and
        #: read without it: a Metadata request waited for a create or a delete of thousands
        #: of partitions to finish, and with it every other client of the broker's loop
        self._view: dict[str, tuple[PartitionLog, ...]] = {}
        self._closed = False
        self.path.mkdir(parents=True, exist_ok=True)
        _check_ours(self.path)
        self._lock_fd = self._acquire_lock()
        #: the last close was clean: damage in a newest segment is kept, not cut away
        self.clean_shutdown = (self.path / _CLEAN_FILE).exists()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        try:
            self._remove_deleted_leftovers()
            self._load()
            self._drop_clean_marker()
        except BaseException:
            self._close_all()
            self._release_lock()
            raise
        self._flush_interval_s = flush_interval_s
        self._start_flusher_if_needed()

    # ------------------------------------------------------------------ lock

    def _acquire_lock(self) -> int:
        fd = os.open(self.path / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DataDirLocked(self.path, f"held by pid {holder}" if holder else "") from None
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            # (a full disk: the lock stayed held by this process, and every later open of
            # the directory in it was refused as "locked by another owner")
            os.close(fd)
            raise OSError(exc.errno, exc.strerror, str(self.path / _LOCK_FILE)) from exc
        return fd

    def _drop_clean_marker(self) -> None:
        """Once opened (and before anything is appended), a crash is seen as one by the next
        open; a failed open leaves the marker, so its retry keeps what this one would have."""
        if self.clean_shutdown:
            (self.path / _CLEAN_FILE).unlink(missing_ok=True)
            fsync_dir(self.path)

    def _mark_clean(self) -> None:
        fd = os.open(self.path / _CLEAN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.path)

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            fd, self._lock_fd = self._lock_fd, -1
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # ------------------------------------------------------------------ metadata

    def _publish(self) -> None:
        """Under the lock, once the metadata is saved: the view the lock-free reads see."""
        self._view = {name: tuple(t.logs) for name, t in self._topics.items()}

    def _meta_path(self) -> Path:
        return self.path / _META_FILE

    def _load(self) -> None:
        meta_path = self._meta_path()
        if not meta_path.exists():
            self._remove_orphan_partitions()  # (and an error for each holding records)
            return
        found, deleting = read_meta(meta_path)
        for name, config, count in found:
            logs = [self._open_log(name, p, config) for p in range(count)]
            self._topics[name] = _Topic(config, logs)
        self._publish()
        # a delete a crash cut short, finished once the topics are loaded: it saves the
        # metadata, which must still name them (a name listed again was made after it)
        self._deleting = {n: c for n, c in deleting.items() if n not in self._topics}
        for name in sorted(self._deleting):
            self._finish_delete(name)
        self._remove_orphan_partitions()

    def _remove_orphan_partitions(self) -> None:
        """Remove partition directories the metadata does not know: what a crash in the middle
        of creating a topic or adding partitions left behind (metadata is written last).

        Only directories whose logs are all empty are removed; those holding data are left,
        with one error a topic in the log (not one a directory: a lost ``topics.json`` made
        39 lines of the demo's), for an operator to look at.
        """
        kept: dict[tuple[str, str], list[int]] = {}
        for entry in self.path.iterdir():
            m = _PARTITION_DIR.fullmatch(entry.name)
            if m is None or not entry.is_dir():
                continue
            name, p = m.group(1), int(m.group(2))
            topic = self._topics.get(name)
            if topic is not None and p < len(topic.logs):
                continue
            why = _kept_because(entry)
            if why is not None:
                kept.setdefault((name, why), []).append(p)
                continue
            log.info("%s: removing %s, left by an interrupted creation", self.path, entry.name)
            shutil.rmtree(entry, ignore_errors=True)
        for (name, why), partitions in sorted(kept.items()):
            partitions.sort()
            shown = ", ".join(f"{name}-{p}" for p in partitions[:8])
            more = f" and {len(partitions) - 8} more" if len(partitions) > 8 else ""
            log.error(
                "%s: %d partition directory(ies) of topic %r not in the metadata hold %s "
                "(%s%s); left alone (a topic whose metadata was lost: logmarshal topic "
                "adopt %s)",
                self.path,
                len(partitions),
                name,
                why,
                shown,
                more,
                name,
            )

    def _save(self) -> None:
        """Write-temp, fsync, rename, fsync dir: the metadata is either old or new, never torn."""
        meta: dict[str, Any] = {
            "version": META_VERSION,
            "topics": {
                name: {
                    "partitions": len(t.logs),
                    "config": t.config.to_dict(),
                    "explicit": sorted(t.config.explicit),
                }
                for name, t in sorted(self._topics.items())
            },
        }
        if self._deleting:
            meta["deleting"] = dict(sorted(self._deleting.items()))
        data = json.dumps(meta, indent=1, sort_keys=True).encode("utf-8")
        if len(data) > MAX_META_BYTES:  # (the next open would refuse it: nothing is written)
            raise LimitExceeded(
                f"the topics' metadata would be {len(data)} bytes, over the {MAX_META_BYTES} "
                "a data directory opens with: the change is refused (fewer topics, or shorter "
                "config values)"
            )
        tmp = self.path / f"{_META_FILE}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._meta_path())
        fsync_dir(self.path)

    def _partition_dir(self, name: str, partition: int) -> Path:
        return self.path / f"{name}-{partition}"

    def _open_log(self, name: str, partition: int, config: TopicConfig) -> PartitionLog:
        return PartitionLog(
            self._partition_dir(name, partition),
            config,
            self._clock,
            topic=name,
            partition=partition,
            validate_records=self._validate_records,
            handles=self.handles,
            clean_shutdown=self.clean_shutdown,
        )

    def _remove_deleted_leftovers(self) -> None:
        for entry in self.path.iterdir():
            # only what delete_topic names (topic-partition.uuid-delete) and only a partition
            # directory of ours: never a directory of someone else's that ends in "-delete"
            if _DELETED_DIR.fullmatch(entry.name) and _partition_files(entry) is not None:
                log.info("%s: removing leftover of a deleted topic %s", self.path, entry.name)
                shutil.rmtree(entry, ignore_errors=True)
        (self.path / f"{_META_FILE}.tmp").unlink(missing_ok=True)

    # ------------------------------------------------------------------ topics

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"data directory {self.path} is closed")

    def create_topic(
        self, name: str, partitions: int = 1, config: TopicConfig | None = None
    ) -> TopicInfo:
        """Create a topic with empty partitions; metadata is durable when this returns."""
        if config is None:
            config = TopicConfig()
        with self._lock:
            if name in self._deleting:  # (deleted, its directories not all gone yet)
                self._finish_delete(name)
            self._check_create(name, partitions, config)
            logs = []
            try:
                for p in range(partitions):
                    pdir = self._partition_dir(name, p)
                    if pdir.exists():  # orphan of a crash between mkdir and metadata write
                        shutil.rmtree(pdir)
                    logs.append(self._open_log(name, p, config))
                self._topics[name] = _Topic(config, logs)
                self._save()
                self._publish()
                config.log_notes(name)
            except BaseException:
                self._topics.pop(name, None)
                self._discard(name, logs, 0)
                raise
            return self._describe(name)

    def adopt_topic(
        self, name: str, config: TopicConfig | None = None, partitions: int | None = None
    ) -> TopicInfo:
        """Put back in the metadata a topic whose partition directories are here but
        unlisted (``topics.json`` lost, or moved aside because it was damaged), records and
        all. Its partitions are ``name-0`` up to the highest numbered directory found, or
        ``partitions`` if that is more: opening a directory without metadata removed the
        empty ones, so those are made again, empty. Its configs are ``config`` (the
        defaults otherwise): the ones it had were in the lost file."""
        if config is None:
            config = TopicConfig()
        with self._lock:
            validate_topic_name(name)
            if not isinstance(config, TopicConfig):
                raise InvalidConfig(f"config must be a TopicConfig, got {type(config).__name__}")
            self._check_open()
            if name in self._topics:
                raise TopicExists(name)
            self._check_no_collision(name)
            found = sorted(
                int(m.group(2))
                for entry in self.path.iterdir()
                if (m := _PARTITION_DIR.fullmatch(entry.name)) and m.group(1) == name
                and str(int(m.group(2))) == m.group(2) and entry.is_dir()
            )  # fmt: skip
            if not found:
                raise StorageError(f"no partition directory of {name!r} in {self.path}")
            count = found[-1] + 1 if partitions is None else max(found[-1] + 1, partitions)
            check_partition_count(count)
            self._check_per_topic(count)
            for p in found:
                if _partition_files(self._partition_dir(name, p)) is None:
                    raise StorageError(
                        f"{self._partition_dir(name, p)} holds files that are not a partition's"
                    )
            self._check_budget(count)
            logs: list[PartitionLog] = []
            try:
                for p in range(count):
                    logs.append(self._open_log(name, p, config))
                self._topics[name] = _Topic(config, logs)
                self._save()
                self._publish()
            except BaseException:
                self._topics.pop(name, None)
                for plog in logs:  # closed, never removed: they hold the records
                    plog.close()
                raise
            log.warning(
                "%s: adopted topic %s: %d partition(s), %d of them found%s",
                self.path,
                name,
                count,
                len(found),
                "" if config != TopicConfig() else "; its configs are the defaults",
            )
            return self._describe(name)

    def topics(self) -> list[str]:
        return sorted(self._view)  # (without the lock: :attr:`_view`)

    def describe(self, name: str) -> TopicInfo:
        with self._lock:
            self._check_open()
            return self._describe(name)

    def partition_count(self, name: str) -> int:
        """How many partitions ``name`` has (UnknownTopic if none): what :meth:`describe`
        says, without reading every partition's offsets and size (a Metadata answer needs
        only this; read without the lock: :attr:`_view`)."""
        self._check_open()
        return len(self._viewed(name))

    def unwritable(self, name: str) -> tuple[int, ...]:
        """The partitions of ``name`` that refuse appends after a failed fsync, until the
        data directory is opened again (:attr:`PartitionLog.unwritable`; without the lock)."""
        self._check_open()
        return tuple(p for p, plog in enumerate(self._viewed(name)) if plog.unwritable is not None)

    def _viewed(self, name: str) -> tuple[PartitionLog, ...]:
        try:
            return self._view[name]
        except (KeyError, TypeError):
            raise UnknownTopic(name) from None

    def _describe(self, name: str) -> TopicInfo:
        topic = self._topic(name)
        infos = tuple(
            PartitionInfo(
                p, plog.log_start_offset, plog.log_end_offset, plog.size_bytes, plog.segment_count
            )
            for p, plog in enumerate(topic.logs)
        )
        return TopicInfo(name, len(topic.logs), topic.config, infos)

    def _topic(self, name: str) -> _Topic:
        try:
            return self._topics[name]
        except (KeyError, TypeError):
            raise UnknownTopic(name) from None

    def delete_topic(self, name: str) -> None:
        """Forget the topic durably first, its directories named as to go (``deleting`` in
        topics.json), then remove them. A crash between the two is finished at the next
        open: one mid-delete kept about half the partitions' records for good, and the name
        could not be made again (and a name near 249 characters failed its renaming to
        ``NAME-P.UUID-delete``, longer than a file name may be)."""
        with self._lock:
            self._check_open()
            topic = self._topic(name)
            del self._topics[name]
            self._deleting[name] = len(topic.logs)
            try:
                self._save()
            except BaseException:
                self._topics[name] = topic
                del self._deleting[name]
                raise
            self._publish()
            for plog in topic.logs:
                with contextlib.suppress(StorageError):  # (its fsync failed: gone anyway)
                    plog.close()
            self._finish_delete(name)

    def _finish_delete(self, name: str) -> None:
        """Under the lock: remove a deleted topic's partition directories, then forget that
        they were to go (if one could not be removed, the next open tries again)."""
        left = []
        for p in range(self._deleting[name]):
            pdir = self._partition_dir(name, p)
            shutil.rmtree(pdir, ignore_errors=True)
            if pdir.exists():
                left.append(pdir.name)
        fsync_dir(self.path)
        if left:
            log.error("%s: cannot remove %s of deleted topic %s", self.path, left, name)
            return
        del self._deleting[name]
        self._save()

    def alter_config(self, name: str, config: TopicConfig) -> TopicInfo:
        """Replace a topic's config: durable when this returns, in force for the next append,
        roll, retention pass or cleaning of every partition."""
        if not isinstance(config, TopicConfig):
            raise InvalidConfig(f"config must be a TopicConfig, got {type(config).__name__}")
        with self._lock:
            self._check_open()
            topic = self._topic(name)
            old = topic.config
            _check_alter(name, old, config)
            topic.config = config
            try:
                self._save()
            except BaseException:
                topic.config = old
                raise
            for plog in topic.logs:
                plog.config = config
            config.log_notes(name)
            log.info("topic %s: config changed to %s", name, config.to_dict())
            return self._describe(name)

    def check_alter(self, name: str, config: TopicConfig) -> None:
        """Raise what :meth:`alter_config` would raise, changing nothing (validate_only)."""
        with self._lock:
            self._check_open()
            _check_alter(name, self._topic(name).config, config)

    def check_create(
        self, name: str, partitions: int = 1, config: TopicConfig | None = None
    ) -> None:
        """Raise what :meth:`create_topic` would, and do nothing (Kafka's validate_only)."""
        with self._lock:
            self._check_create(name, partitions, TopicConfig() if config is None else config)

    def _check_create(self, name: str, partitions: int, config: TopicConfig) -> None:
        validate_topic_name(name)
        check_partition_count(partitions)
        self._check_per_topic(partitions)
        if not isinstance(config, TopicConfig):
            raise InvalidConfig(f"config must be a TopicConfig, got {type(config).__name__}")
        config.check_settable()
        self._check_open()
        if name in self._topics:
            raise TopicExists(name)
        self._check_no_collision(name)
        self._check_budget(partitions)
        self._check_no_records(name, 0, partitions)

    def _check_no_collision(self, name: str) -> None:
        for other in self._topics:
            if _collision_key(other) == _collision_key(name):
                raise InvalidTopicName(
                    f"topic {name!r} collides with existing topic {other!r} ('.' and '_' clash)"
                )

    def check_add_partitions(self, name: str, total: int) -> None:
        """Raise what :meth:`add_partitions` would, and do nothing (Kafka's validate_only)."""
        with self._lock:
            self._check_growth(name, total)

    def _check_growth(self, name: str, total: int) -> int:
        """What :meth:`add_partitions` checks; the topic's partition count."""
        check_partition_count(total)
        self._check_per_topic(total)
        self._check_open()
        current = len(self._topic(name).logs)
        if total <= current:
            raise InvalidConfig(
                f"topic {name!r} has {current} partitions; the count can only grow, got {total}"
            )
        self._check_budget(total - current)
        self._check_no_records(name, current, total - current)
        return current

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow a topic to `total` partitions (Kafka never shrinks a topic)."""
        with self._lock:
            current = self._check_growth(name, total)
            topic = self._topic(name)
            added = []
            try:
                for p in range(current, total):
                    pdir = self._partition_dir(name, p)
                    if pdir.exists():
                        shutil.rmtree(pdir)
                    added.append(self._open_log(name, p, topic.config))
                topic.logs.extend(added)
                self._save()
                self._publish()
            except BaseException:
                del topic.logs[current:]
                self._discard(name, added, current)
                raise
            return self._describe(name)

    def _check_per_topic(self, count: int) -> None:
        if count > self.max_partitions_per_topic:
            raise InvalidConfig(
                f"{count} partitions is more than the {self.max_partitions_per_topic} a topic may have"
            )

    def _check_budget(self, more: int) -> None:
        have = sum(len(t.logs) for t in self._topics.values())
        if have + more > self.max_partitions:
            raise LimitExceeded(
                f"{more} more partition(s) would exceed this broker's budget of "
                f"{self.max_partitions} partitions ({have} exist)"
            )

    def _check_no_records(self, name: str, first: int, count: int) -> None:
        """Partitions ``first..first+count-1`` of ``name`` may be made: no directory of theirs
        holds records (ones the metadata lost) or files of someone's, which making them,
        or undoing that, would remove."""
        for p in range(first, first + count):
            pdir = self._partition_dir(name, p)
            if not pdir.exists():
                continue
            why = _kept_because(pdir)
            if why is not None:
                raise StorageError(
                    f"{pdir} exists and holds {why} that the metadata does not list: move it "
                    f"away to make {name}-{p}"
                )

    def _discard(self, name: str, logs: list[PartitionLog], first: int) -> None:
        """Undo a creation that failed half way: close and remove the new partitions' dirs."""
        for plog in logs:
            plog.close()
        for p in range(first, first + len(logs) + 1):
            pdir = self._partition_dir(name, p)
            if pdir.exists():
                shutil.rmtree(pdir, ignore_errors=True)

    def partition(self, name: str, partition: int) -> PartitionLog:
        topic = self._topics.get(name) if isinstance(name, str) else None
        if topic is None or self._closed:
            if self._closed:
                self._check_open()
            raise UnknownTopic(name)
        logs = topic.logs
        if (
            not isinstance(partition, int)
            or isinstance(partition, bool)
            or not 0 <= partition < len(logs)
        ):
            raise UnknownPartition(name, partition)
        return logs[partition]

    # ------------------------------------------------------------------ maintenance

    def _all_logs(self) -> list[PartitionLog]:
        with self._lock:
            return [plog for t in self._topics.values() for plog in t.logs]

    def enforce_retention(self, now: int | None = None) -> int:
        """Apply every topic's retention at ``now`` (default: the DataDir's clock); returns
        the number of segments deleted. A partition that fails is logged and skipped."""
        now = self._clock() if now is None else now
        deleted = 0
        for plog in self._all_logs():
            try:
                deleted += plog.enforce_retention(now)
            except Exception:
                log.exception("%s: retention check failed; retried next time", plog.directory)
        return deleted

    def clean(self, now: int | None = None) -> int:
        """One cleaner check of every compacted partition at ``now`` (default: the DataDir's
        clock): those that are due are cleaned; returns records removed."""
        now = self._clock() if now is None else now
        removed = 0
        for plog in self._all_logs():
            try:
                removed += plog.clean(now)
            except Exception:
                log.exception("%s: compaction failed; the log is left as it was", plog.directory)
        return removed

    def flush(self) -> None:
        """fsync every partition; one that fails does not keep the others from it (raises
        the first error once all were tried)."""
        failed: list[Exception] = []
        for plog in self._all_logs():
            if plog.unwritable is not None:
                failed.append(StorageError(f"{plog.directory} failed an fsync: {plog.unwritable}"))
                continue  # (logged when it failed; what its pages hold is unknown)
            try:
                plog.flush()
            except (OSError, StorageError) as exc:
                failed.append(exc)
        if failed:
            raise failed[0]

    def _start_flusher_if_needed(self) -> None:
        """flush.ms must hold for a quiet log too, so a small thread checks due flushes."""
        self._flusher = threading.Thread(
            target=self._flush_loop, name=f"storage-flusher:{self.path.name}", daemon=True
        )
        self._flusher.start()

    def _flush_loop(self) -> None:
        """The one maintenance thread: due flushes every tick, the cleaner every
        clean_interval_s, retention every retention_check_interval_ms (intervals measured
        on the monotonic clock; what is expired is decided on the DataDir's clock)."""
        last_clean = last_retention = time.monotonic()
        while not self._stop.wait(self._flush_interval_s):
            if self.clean_interval_s > 0 and time.monotonic() - last_clean >= self.clean_interval_s:
                self.clean()
                last_clean = time.monotonic()
            every = self.retention_check_interval_ms
            if every > 0 and (time.monotonic() - last_retention) * 1000 >= every:
                deleted = self.enforce_retention()
                if deleted:
                    log.info("%s: retention deleted %d segment(s)", self.path, deleted)
                last_retention = time.monotonic()
            for plog in self._all_logs():
                if plog.config.flush_ms is None:
                    continue
                try:
                    plog.flush_if_due()
                except Exception:
                    log.exception("%s: periodic flush failed", plog.directory)

    # ------------------------------------------------------------------ lifecycle

    def _close_all(self) -> bool:
        """Close every partition; whether all of them closed (flushed) without an error."""
        ok = True
        for topic in self._topics.values():
            for plog in topic.logs:
                try:
                    plog.close()
                except Exception:
                    ok = False
                    log.exception("%s: close failed", plog.directory)
        return ok

    def close(self) -> None:
        """Flush every partition and release the lock; safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join()
        with self._lock:
            try:
                if self._close_all():
                    self._mark_clean()
            finally:
                self._release_lock()

    def __enter__(self) -> DataDir:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DataDir({str(self.path)!r})"


def _check_alter(name: str, old: TopicConfig, new: TopicConfig) -> None:
    """Internal topics (names starting with ``__``) keep their timestamp type: their readers
    rely on whose clock stamped the records (LogAppendTime: the broker's)."""
    new.check_settable()
    if name.startswith("__") and new.timestamp_type != old.timestamp_type:
        raise PolicyViolation(
            f"{name} is an internal topic: its message.timestamp.type cannot change"
        )
