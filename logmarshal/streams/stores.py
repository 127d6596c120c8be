"""Key-value state stores: in memory, or on local disk in SQLite or RocksDB.

A store records which keys changed since the last commit (``dirty``) so the task can write
exactly those to the store's changelog. Keys and values are JSON-able objects; the engines
keep them as their JSON bytes so both kinds behave identically and the changelog is the
same bytes. In front of the engine, a write-behind cache of objects (as Kafka Streams'
record cache) keeps serialization off the per-record path: a key written many times
between two commits is encoded, stored and logged once. SQLite (stdlib ``sqlite3``) and
RocksDB (``rocksdict``, what Kafka Streams, Faust and quix-streams default to) are the
persistent engines; both keep the local data at a state the changelog has (docs/streams.md).
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import shutil
import sqlite3
from collections.abc import Iterator
from typing import Any, cast

import attrs
from rocksdict import Options, Rdict, WriteBatch

from ..errors import ClosedError, LogmarshalError
from .serde import json_deserializer, json_serializer

__all__ = [
    "KINDS",
    "PERSISTENT",
    "InMemoryStore",
    "KeyValueStore",
    "RocksDBStore",
    "SqliteStore",
    "StoreDamaged",
    "StoreSpec",
    "StoreUnavailable",
    "open_store",
]

log = logging.getLogger(__name__)

#: the store engines a :class:`StoreSpec` may name
KINDS = ("memory", "sqlite", "rocksdb")
#: the persistent engine a spec of kind ``"persistent"`` gets: the fastest durable one in
#: the same-run measurement of ``bench/stores.py`` (docs/streams.md, "Stores")
PERSISTENT = "rocksdb"


@attrs.frozen
class StoreSpec:
    """A store's name and engine: ``"memory"``, ``"sqlite"`` or ``"rocksdb"`` (persistent
    on local disk), or ``"persistent"``: the default persistent engine (:data:`PERSISTENT`).
    Every store is backed by its changelog (exactly-once state is restored from it), so
    ``logged`` is True: False is refused (it was taken, and a changelog kept all the same)."""

    name: str = attrs.field()
    kind: str = attrs.field(
        default="memory", converter=lambda k: PERSISTENT if k == "persistent" else k
    )
    logged: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))

    @name.validator
    def _name(self, _a: object, value: str) -> None:
        if not isinstance(value, str) or not value or "/" in value:
            raise ValueError(f"a store name must be a non-empty str without '/', got {value!r}")

    @logged.validator
    def _logged(self, _a: object, value: bool) -> None:
        if value is False:
            raise ValueError(
                f"store {self.name!r}: logged=False is not supported: every store is backed "
                "by its changelog, from which exactly-once state is restored"
            )

    @kind.validator
    def _kind(self, _a: object, value: str) -> None:
        if value not in KINDS:
            raise ValueError(
                f'store kind must be "memory", "sqlite", "rocksdb" or "persistent", got {value!r}'
            )


class _StoreFilesError(LogmarshalError):
    """An error of a store's local files: which store, where, and what the engine raised."""

    def __init__(self, store: str, path: str, cause: BaseException, said: str) -> None:
        super().__init__(f"store {store!r}: {said}")
        self.store, self.path, self.cause = store, path, cause


class StoreDamaged(_StoreFilesError):
    """A store's local files turned out damaged in use (a page SQLite finds malformed, a
    RocksDB file corrupt or missing): not the record's fault, so it is never retried or
    dead-lettered. The store deletes its files when it closes; the task's next set-up (the
    App sets it up again at once) restores it from its changelog, the durable copy."""

    def __init__(self, store: str, path: str, cause: BaseException) -> None:
        said = (
            f"its local files at {path} are damaged ({cause}); they are deleted when the "
            "task closes, and its next set-up restores the store from its changelog"
        )
        super().__init__(store, path, cause, said)


class StoreUnavailable(_StoreFilesError):
    """A store's local files cannot be opened, and are not damaged: a file where its
    RocksDB directory goes, permissions, a full disk, a SQLite file of another schema. They
    are left as they are (nothing is deleted); the App tries the task's set-up again."""

    def __init__(self, store: str, path: str, cause: BaseException) -> None:
        said = f"cannot open its local files at {path} ({type(cause).__name__}: {cause})"
        super().__init__(store, path, cause, said)


def _k(key: Any) -> bytes:
    data = json_serializer(key)
    if data is None:
        raise ValueError("a store key cannot be None")
    return data


def _hashable(obj: Any) -> Any:
    """A key read back from JSON, as a key of :meth:`all`'s dict: lists become tuples and
    objects :class:`KeyDict` (a dict key made ``all()`` raise "unhashable type")."""
    if isinstance(obj, list):
        return tuple(_hashable(x) for x in obj)
    if isinstance(obj, dict):
        return KeyDict({k: _hashable(v) for k, v in obj.items()})
    return obj


class KeyDict(dict[str, Any]):
    """A store key that is a JSON object, as :meth:`all` gives it back: equal to the dict
    put, and hashable, so it cannot change."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]  # (dict sets __hash__ to None)
        return hash(tuple(sorted(self.items())))

    def __reduce__(self) -> tuple[type[KeyDict], tuple[dict[str, Any]]]:
        """Copied and pickled whole (their default sets each item, which it refuses)."""
        return KeyDict, (dict(self),)

    def _unchanging(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a store key read back does not change (copy it with dict())")

    __setitem__ = __delitem__ = __ior__ = _unchanging
    clear = pop = popitem = setdefault = update = _unchanging


#: a store's cache holds at most this many entries (dirty and clean) by default; past it,
#: the dirty ones are written through to the engine (not to the changelog) and it is emptied
CACHE_ENTRIES = 100_000


#: an absent cache entry (None is a cached delete)
class _Missing(enum.Enum):
    """What ``dict.get`` answers for a key a cache lacks: a type, so checks narrow it."""

    MISSING = enum.auto()


_MISSING = _Missing.MISSING

#: ints this far from 0 always have a JSON form (Python refuses to print ints of more than
#: 4300 digits): a bigger one is serialized at ``put``, where its error belongs
_BIG_INT = 1 << 1024
#: its negation, computed once (``-_BIG_INT`` in a check built a 1024-bit int each time)
_MINUS_BIG_INT = -_BIG_INT


def _drop_write(*_args: Any) -> None:
    """A store write of an input record the store already reflects: dropped."""


def _encoded(cache_key: str | bytes) -> bytes:
    """A cache key's store key: the JSON bytes of a str, the bytes themselves otherwise."""
    return (
        _k(cache_key) if isinstance(cache_key, str) else cache_key
    )  # (str: exactly, see _cache_key)


def _utf8_ok(text: str) -> bool:
    """Can ``text`` be written as UTF-8 (no lone surrogates)?"""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _cacheable(value: Any) -> bool:
    """Is ``value`` an immutable JSON scalar that comes back equal and of the same type from
    its JSON bytes, and whose serialization cannot fail? Such values are cached as objects
    until the commit; any other is serialized at ``put`` (a later mutation of a list or dict
    must not change what was written, and a bad value must fail where it was written)."""
    if value is None:
        return True
    t = type(value)
    if t is int:
        return _MINUS_BIG_INT < value < _BIG_INT
    if t is str:
        return value.isascii() or _utf8_ok(value)
    return t is float or t is bool


class KeyValueStore:
    """Common behaviour: JSON encoding, the write-behind cache, and the dirty set the
    changelog is written from.

    The cache works as Kafka Streams' record cache does for a store: ``put``
    of a scalar value keeps the object (``_writes``), ``get`` reads it from there, and only
    :meth:`flush` (at the task's commit, through :attr:`dirty` or :meth:`take_dirty`)
    serializes each key's last value once, writes it to the engine and marks it dirty, so
    the changelog gets one record per key per commit. Nothing of the commit protocol
    changes: the engine and the changelog see the same writes as before, only later and
    once per key. Values read from the engine are kept too (``_reads``, bounded), so a key
    read again is not decoded again. Cache keys are the key itself for a str key (the common
    case: no encoding on the hot path) and its JSON bytes otherwise; a key whose JSON is a
    string is always cached under the str, so one key never has two entries.
    """

    name: str

    def __init__(self, name: str, cache_entries: int = CACHE_ENTRIES) -> None:
        self.name = name
        self._dirty: dict[bytes, bytes | None] = {}
        #: cache key -> the last value written since the last flush (not in the engine yet;
        #: None: deleted). Insertion-ordered: a commit's records come in a reproducible order
        self._writes: dict[str | bytes, Any] = {}
        #: cache key -> value, equal to the engine's (shadowed by ``_writes``)
        self._reads: dict[str | bytes, Any] = {}
        self._cache_entries = cache_entries
        #: while records are atomic (:meth:`_journal_writes`): cache key -> the value the key
        #: had before the current input record's first write of it; None: not journaling
        self._journal: dict[str | bytes, Any] | None = None
        #: the damage found in the local files while in use (they go when the store closes)
        self.damaged: StoreDamaged | None = None

    # raw access, implemented by engines
    def _get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def _put(self, key: bytes, value: bytes | None) -> None:
        raise NotImplementedError

    def _put_many(self, items: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in items:
            self._put(key, value)

    def _items(self) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    @property
    def dirty(self) -> dict[bytes, bytes | None]:
        """Encoded key -> encoded value (None: deleted) of every key changed since the last
        :meth:`take_dirty`: what the next commit writes to the changelog. Reading it flushes
        the cache first, so the engine (``_get``) and this dict are current."""
        if self._writes:
            self.flush()
        return self._dirty

    def _cache_key(self, key: Any) -> str | bytes:
        """The cache key of any key (raising for one with no JSON form, like ``_k``)."""
        if type(key) is str:
            if not (key.isascii() or _utf8_ok(key)):
                _k(key)  # raises here, at the write, not at the commit
            return key
        data = _k(key)
        if data[:1] == b'"':  # a str subclass (or a type that serializes as one)
            return json_deserializer(data)
        return data

    def get(self, key: Any) -> Any:
        ck = key if type(key) is str else self._cache_key(key)
        value = self._writes.get(ck, _MISSING)
        if value is _MISSING:
            value = self._reads.get(ck, _MISSING)
            if value is _MISSING:
                value = self._load(ck)
        return value

    def _load(self, ck: str | bytes) -> Any:
        value = json_deserializer(self._get(_encoded(ck)))
        if _cacheable(value):
            if len(self._reads) >= self._cache_entries:
                self._reads.clear()
            self._reads[ck] = value
        return value

    def put(self, key: Any, value: Any) -> None:
        """Set ``key``; a None value deletes it."""
        ck = key if type(key) is str and key.isascii() else self._cache_key(key)
        journal = self._journal
        if journal is not None and ck not in journal:  # atomic records: see _journal_writes
            old = self._writes.get(ck, _MISSING)
            journal[ck] = self.get(key) if old is _MISSING else old
        # an int that fits one 30-bit digit compares at C speed (a 1024-bit bound does not:
        # a generic comparison, twice a put); any other value is checked by _cacheable
        if (type(value) is int and -0x3FFFFFFF <= value <= 0x3FFFFFFF) or _cacheable(value):
            writes = self._writes
            writes[ck] = value
            if len(writes) > self._cache_entries:
                self._evict()
            return
        self._write_through(ck, value)

    def _write_through(self, ck: str | bytes, value: Any) -> None:
        """A value not cached as an object (see _cacheable): serialized now and written to
        the engine, replacing any cached write."""
        vb = json_serializer(value)
        kb = _encoded(ck)
        self._writes.pop(ck, None)
        self._reads.pop(ck, None)
        self._put(kb, vb)
        self._dirty[kb] = vb

    def delete(self, key: Any) -> None:
        self.put(key, None)

    def _drop_writes(self, drop: bool) -> None:
        """While ``drop``, ``put`` and ``delete`` do nothing: a task sets it around an input
        record this store's restored state already reflects (a crash left it ahead of
        another store). Processors hold the store itself, not a wrapper forwarding to it
        (an attribute lookup through ``__getattr__`` per call cost ~20 ns, twice a word in
        the word count), so the switch shadows the two methods on this instance."""
        attrs_ = vars(self)
        if drop:
            attrs_["put"] = attrs_["delete"] = _drop_write
        else:
            attrs_.pop("put", None)
            attrs_.pop("delete", None)

    def _check_damage(self, exc: BaseException) -> None:
        """An engine call raised ``exc``: if it says the local files are damaged, raise
        :class:`StoreDamaged` (and delete them at :meth:`close`); otherwise return, and the
        caller raises ``exc`` itself (a full disk, a lock: not the files' content)."""
        if _damaged(exc, in_use=True):
            self.damaged = StoreDamaged(self.name, getattr(self, "_path", "?"), exc)
            raise self.damaged from exc

    # -- atomic records: what a failed input record wrote is undone ------------------------

    def _journal_writes(self, on: bool) -> None:
        """Journal every write, so that :meth:`_undo_record` can put back what the current
        input record changed. A task turns it on when a failed record is retried or
        dead-lettered (the App's retry policy): its attempt's writes must not stay. Off, a
        ``put`` costs one attribute read more; on, about 100 ns (a journal entry per key
        and record). Not a shadowing method as :meth:`_drop_writes` is: that gives the
        instance a ``__dict__``, and every attribute read of the store gets slower."""
        self._journal = {} if on else None

    def _undo_record(self) -> None:
        """The current input record failed: every key it wrote gets back the value it had
        before (through the cache, as any write: the next commit logs it)."""
        journal = self._journal
        if not journal:
            return
        for ck, old in journal.items():
            if _cacheable(old):
                self._writes[ck] = old
            else:
                self._write_through(ck, old)
        journal.clear()

    def flush(self) -> None:
        """Write the cached writes to the engine and the dirty set (one encoding per key);
        they stay cached, as reads."""
        writes = self._writes
        if not writes:
            return
        items = [(_encoded(ck), json_serializer(value)) for ck, value in writes.items()]
        self._put_many(items)  # first: if the engine fails, the writes stay cached
        self._dirty.update(items)
        self._writes = {}
        reads = self._reads
        if len(reads) + len(writes) > self._cache_entries:
            reads.clear()
        reads.update(writes)

    def _evict(self) -> None:
        """Write the cached writes through to the engine and drop the whole cache."""
        self.flush()
        self._reads.clear()

    def all(self) -> dict[Any, Any]:
        """Every entry; list keys (windowed ``[key, start]``) come back as tuples.

        A read: the engine's entries with the cached writes over them, nothing flushed. A
        flush from another thread than the processing one (a test or a tool watching a
        running App) raced the processor's puts: a ``get`` between the flush's swap of the
        write cache and its copy into the read cache returned an older value, and the
        processor counted on from it (lost updates, in the changelog too)."""
        items = self.items()
        out = dict(items)
        if len(out) < len(items):
            # distinct keys in the store, equal in Python: the dict kept one of them
            seen: dict[Any, Any] = {}
            for key, _ in items:
                if key in seen:
                    raise ValueError(
                        f"store {self.name!r}: keys {seen[key]!r} and {key!r} are distinct in "
                        "the store and equal in Python (as 1, 1.0 and True are): a dict "
                        "cannot hold both; read them with items()"
                    )
                seen[key] = key
        return out

    def items(self) -> list[tuple[Any, Any]]:
        """Every entry as a (key, value) pair, in the order of the keys' bytes: keys that
        are distinct in the store and equal in Python (1, 1.0, True) each have their own.
        A read, as :meth:`all`."""
        self._refuse_closed()
        writes = dict(self._writes)  # one C-level copy: consistent even beside the processor
        entries = dict(self._items())
        for ck, value in writes.items():
            data = json_serializer(value)  # None for None: a delete
            if data is None:
                entries.pop(_encoded(ck), None)
            else:
                entries[_encoded(ck)] = data
        return [
            (_hashable(json_deserializer(k)), json_deserializer(v))
            for k, v in sorted(entries.items())
        ]

    def restore(self, key: bytes, value: bytes | None) -> None:
        """Apply one changelog record (not marked dirty)."""
        if type(self._writes) is _ClosedCache:
            self._refuse_closed()
        if self._writes or self._reads:  # a restore starts from an empty cache; keep it so
            self._evict()
        self._put(key, value)

    def take_dirty(self) -> dict[bytes, bytes | None]:
        self.flush()
        out, self._dirty = self._dirty, {}
        return out

    def untake_dirty(self, taken: dict[bytes, bytes | None]) -> None:
        """Put back what :meth:`take_dirty` returned, its changelog write having failed: the
        next commit must write those keys (a key changed again since keeps its newer value)."""
        self._dirty = {**taken, **self._dirty}

    def _drop_cache(self) -> None:
        self._writes = {}
        self._reads.clear()
        self._dirty.clear()

    def clear(self) -> None:
        raise NotImplementedError

    def checkpoint(
        self, changelog_offset: int, positions: dict[str, int] | None, epoch: int | None = None
    ) -> None:
        """The local data now equals the valid state of the changelog through
        ``changelog_offset``, reflecting input ``positions``, as judged by a task of fencing
        ``epoch`` that accounted for every record up to there: make it durable locally
        (no-op in memory)."""
        self._refuse_closed()

    def local_checkpoint(self) -> tuple[int, dict[str, int] | None, int | None] | None:
        """(changelog offset, positions, epoch) the local data equals, or None: restore
        from the start of the changelog (also when the epoch is None: a file written before
        fencing, which cannot be checked against the changelog's fences)."""
        self._refuse_closed()
        return None

    def close(self) -> None:
        """Drop the cache: writes not flushed were never committed."""
        self._close_cache()

    def _refuse_closed(self) -> None:
        """ClosedError once closed, before the engine is used: a closed SQLite file's
        error was taken for damage (the store marked damaged, its files deleted)."""
        if type(self._writes) is _ClosedCache:
            raise ClosedError(f"store {self.name!r} is closed")

    def _close_cache(self) -> bool:
        """Drop the cache, and make every later read or write of the store raise
        :class:`~logmarshal.errors.ClosedError` (a SqliteStore's ``get`` answered from its
        cache after close). False if it was closed already: a second close does nothing."""
        if type(self._writes) is _ClosedCache:
            return False
        self._writes = self._reads = _ClosedCache(self.name)
        return True


class _ClosedCache(dict[Any, Any]):
    """A closed store's caches: every use raises. No check on an open store's hot path,
    whose caches are plain dicts (an empty one is falsy, so a flush finds nothing)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise ClosedError(f"store {self._name!r} is closed")

    get = __getitem__ = __setitem__ = __contains__ = pop = setdefault = _refuse


class InMemoryStore(KeyValueStore):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._data: dict[bytes, bytes] = {}

    def _get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def _put(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self._data.pop(key, None)
        else:
            self._data[key] = value

    def _items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(sorted(self._data.items()))

    def clear(self) -> None:
        self._refuse_closed()
        self._data.clear()
        self._drop_cache()


class SqliteStore(KeyValueStore):
    """One SQLite file per task and store; WAL journal, synchronous=NORMAL: the changelog,
    not the local file, is the durable copy, so losing the last local writes is harmless.
    Each changelog write commits the local transaction with the changelog offset it
    matches, so a later restore on this machine replays only the changelog after it."""

    def __init__(self, name: str, path: str | os.PathLike[str]) -> None:
        super().__init__(name)
        self._path = os.fspath(path)
        os.makedirs(os.path.dirname(self._path) or ".", exist_ok=True)
        self._db = sqlite3.connect(self._path, check_same_thread=False)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)"
            )
            self._db.commit()
            for table in ("kv", "meta"):
                columns = [row[1] for row in self._db.execute(f"PRAGMA table_info({table})")]
                if columns != ["k", "v"]:  # (a database of another schema: "no such column")
                    raise sqlite3.OperationalError(
                        f"its table {table} has columns {columns}, not a store's (k, v)"
                    )
        except BaseException:
            self._db.close()  # (a file that is no database: not left open)
            raise

    def _get(self, key: bytes) -> bytes | None:
        try:
            row = self._db.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as exc:
            self._check_damage(exc)
            raise
        return None if row is None else bytes(row[0])

    def _put(self, key: bytes, value: bytes | None) -> None:
        try:
            if value is None:
                self._db.execute("DELETE FROM kv WHERE k = ?", (key,))
            else:
                self._db.execute("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", (key, value))
        except sqlite3.DatabaseError as exc:
            self._check_damage(exc)
            raise

    def _put_many(self, items: list[tuple[bytes, bytes | None]]) -> None:
        """One statement per kind for a whole flush: a commit's writes as batched upserts."""
        try:
            self._db.executemany(
                "DELETE FROM kv WHERE k = ?", [(k,) for k, v in items if v is None]
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)",
                [(k, v) for k, v in items if v is not None],
            )
        except sqlite3.DatabaseError as exc:
            self._check_damage(exc)
            raise

    def _items(self) -> Iterator[tuple[bytes, bytes]]:
        try:
            rows = self._db.execute("SELECT k, v FROM kv ORDER BY k").fetchall()
        except sqlite3.DatabaseError as exc:
            self._check_damage(exc)
            raise
        for k, v in rows:
            yield bytes(k), bytes(v)

    def clear(self) -> None:
        self._refuse_closed()
        self._db.execute("DELETE FROM kv")
        self._db.execute("DELETE FROM meta")
        self._db.commit()
        self._drop_cache()

    def checkpoint(
        self, changelog_offset: int, positions: dict[str, int] | None, epoch: int | None = None
    ) -> None:
        """Commit the local transaction together with the changelog offset it matches:
        writes not yet in the changelog stay uncommitted, so the file never runs ahead."""
        self._refuse_closed()
        meta = json.dumps({"offset": changelog_offset, "positions": positions, "epoch": epoch})
        try:
            self._db.execute("INSERT OR REPLACE INTO meta (k, v) VALUES ('checkpoint', ?)", (meta,))
            self._db.commit()
        except sqlite3.DatabaseError as exc:
            self._check_damage(exc)
            raise

    def local_checkpoint(self) -> tuple[int, dict[str, int] | None, int | None] | None:
        self._refuse_closed()
        row = self._db.execute("SELECT v FROM meta WHERE k = 'checkpoint'").fetchone()
        if row is None:
            return None
        meta = json.loads(row[0])
        return int(meta["offset"]), meta["positions"], meta.get("epoch")

    def close(self) -> None:
        if not self._close_cache():
            return
        try:
            self._db.rollback()  # what the changelog does not have must not survive locally
        finally:
            self._db.close()
            if self.damaged is not None:
                _remove_local("sqlite", self._path)
                log.warning("%s; deleted", self.damaged)


#: RocksDB key of a store's local checkpoint: not JSON (a store key always is), and below
#: every JSON key, so a scan from :data:`_FIRST_KEY` never sees it
_CHECKPOINT_KEY = b"\x00checkpoint"
#: the lowest possible store key (JSON text starts with a printable ASCII character)
_FIRST_KEY = b"\x01"
#: above every store key: no JSON text starts with 0xFF (UTF-8 never has that byte)
_PAST_KEYS = b"\xff"


class RocksDBStore(KeyValueStore):
    """One RocksDB directory per task and store (``rocksdict``, raw bytes).

    The same local contract as :class:`SqliteStore`'s transaction: writes since the last
    :meth:`checkpoint` are kept aside (``_pending``, read through by ``_get``) and reach
    RocksDB in one atomic ``WriteBatch`` together with the changelog offset they match, so
    the directory never runs ahead of the changelog, and :meth:`close` drops them. The WAL
    is on and not synced per write (as SQLite's ``synchronous=NORMAL``): a process crash
    loses nothing written, a power loss may lose the last batches, and the changelog is the
    durable copy either way. Pending writes are held in memory: a commit's changed keys, and
    during a restore from the changelog's start the whole restored state until the fence's
    checkpoint (SQLite's open transaction spills to its file instead)."""

    def __init__(self, name: str, path: str | os.PathLike[str]) -> None:
        super().__init__(name)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        self._path = os.fspath(path)
        os.makedirs(os.path.dirname(self._path) or ".", exist_ok=True)
        self._db = Rdict(self._path, options)
        #: key -> value (None: deleted) written since the last checkpoint: not in RocksDB
        self._pending: dict[bytes, bytes | None] = {}

    def _get(self, key: bytes) -> bytes | None:
        value = self._pending.get(key, _MISSING)
        if value is _MISSING:
            try:
                return self._db.get(key)
            except Exception as exc:  # rocksdict: a bare Exception with RocksDB's status
                self._check_damage(exc)
                raise
        return value

    def _put(self, key: bytes, value: bytes | None) -> None:
        self._pending[key] = value

    def _put_many(self, items: list[tuple[bytes, bytes | None]]) -> None:
        self._pending.update(items)

    def _items(self) -> Iterator[tuple[bytes, bytes]]:
        # the pending writes first (one C-level copy), then the engine: a checkpoint between
        # the two moves them into the engine, where the scan finds them
        pending = dict(self._pending)
        # raw_mode: keys and values are bytes (rocksdict's types say any of its Python types)
        stored = cast("Iterator[tuple[bytes, bytes]]", self._db.items(from_key=_FIRST_KEY))
        try:
            entries = {bytes(k): bytes(v) for k, v in stored}
        except Exception as exc:
            self._check_damage(exc)
            raise
        for key, value in pending.items():
            if value is None:
                entries.pop(key, None)
            else:
                entries[key] = value
        return iter(sorted(entries.items()))

    def clear(self) -> None:
        """Delete every entry and the checkpoint, at once (a crash after it restores from
        the changelog's start)."""
        self._refuse_closed()
        self._pending = {}
        self._db.delete_range(b"", _PAST_KEYS)
        self._drop_cache()

    def checkpoint(
        self, changelog_offset: int, positions: dict[str, int] | None, epoch: int | None = None
    ) -> None:
        """Write the pending writes and the changelog offset they match in one batch."""
        self._refuse_closed()
        batch = WriteBatch(raw_mode=True)
        for key, value in self._pending.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        meta = json.dumps({"offset": changelog_offset, "positions": positions, "epoch": epoch})
        batch.put(_CHECKPOINT_KEY, meta.encode())
        try:
            self._db.write(batch)
        except Exception as exc:
            self._check_damage(exc)
            raise
        self._pending = {}

    def local_checkpoint(self) -> tuple[int, dict[str, int] | None, int | None] | None:
        self._refuse_closed()
        raw = self._db.get(_CHECKPOINT_KEY)
        if raw is None:
            return None
        meta = json.loads(raw)
        return int(meta["offset"]), meta["positions"], meta.get("epoch")

    def close(self) -> None:
        if not self._close_cache():
            return
        self._pending = {}  # what the changelog does not have must not survive locally
        try:
            self._db.close()
        finally:
            if self.damaged is not None:
                _remove_local("rocksdb", self._path)
                log.warning("%s; deleted", self.damaged)


def _damaged(exc: BaseException, in_use: bool = False) -> bool:
    """Does ``exc``, raised opening a store's local files (or, ``in_use``, by a read or
    write of them), say they are damaged (a file truncated or overwritten, a malformed page,
    a RocksDB file missing), rather than unreachable (a directory where the file should be,
    permissions, a full disk, a lock)?"""
    if isinstance(exc, sqlite3.DatabaseError):
        # "file is not a database", "database disk image is malformed": DatabaseError itself;
        # its kinds are not the file's content (OperationalError: unable to open, locked, disk
        # I/O; ProgrammingError: closed; DataError: "string or blob too big", a record's)
        return type(exc) is sqlite3.DatabaseError
    if isinstance(exc, ValueError | KeyError | TypeError):
        return not in_use  # (a checkpoint record that is not the JSON written there)
    text = str(exc)
    # rocksdict raises a bare Exception with RocksDB's status text
    return type(exc) is Exception and (
        text.startswith("Corruption") or (text.startswith("IO error") and "No such file" in text)
    )


def _open(kind: str, name: str, path: str) -> KeyValueStore:
    store: KeyValueStore = SqliteStore(name, path) if kind == "sqlite" else RocksDBStore(name, path)
    try:
        store.local_checkpoint()  # (what a restore reads first: damaged, it must fail here)
    except BaseException:
        store.close()
        raise
    return store


def open_store(kind: str, name: str, path: str | os.PathLike[str]) -> KeyValueStore:
    """A persistent store of engine ``kind`` (``"sqlite"`` or ``"rocksdb"``) at ``path``. If
    its local files are damaged (a disk fault, a file truncated or overwritten after a crash)
    they are deleted and the store opens empty: a restore then rebuilds it from its changelog,
    the durable copy, instead of the task failing to start on every attempt."""
    path = os.fspath(path)
    try:
        return _open(kind, name, path)
    except Exception as exc:
        if not _damaged(exc):
            # (rocksdict's is a bare Exception, "File exists (os error 17)", naming no path)
            raise StoreUnavailable(name, path, exc) from exc
        log.warning(
            "store %s: its local files at %s cannot be read (%s); deleted, the store is "
            "restored from its changelog",
            name,
            path,
            exc,
        )
    _remove_local(kind, path)
    return _open(kind, name, path)


def _remove_local(kind: str, path: str) -> None:
    """Delete a persistent store's local files (a damaged store's: the changelog restores
    it); what is already gone is no error."""
    if kind == "rocksdb":
        shutil.rmtree(path, ignore_errors=True)
    else:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path + suffix)
