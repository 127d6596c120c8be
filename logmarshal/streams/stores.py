"""Key-value state stores: in memory, or on local disk in SQLite.

A store records which keys changed since the last commit (``dirty``) so the task can write
exactly those to the store's changelog. Keys and values are JSON-able objects; the store
keeps them as their JSON bytes so both kinds behave identically and the changelog is the
same bytes. SQLite (stdlib ``sqlite3``) is the persistent engine: no extra dependency, a
maintained embedded store, and fast enough for point reads and batched upserts (README).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from typing import Any

import attrs

from .serde import json_deserializer, json_serializer

__all__ = ["InMemoryStore", "KeyValueStore", "SqliteStore", "StoreSpec"]


@attrs.frozen
class StoreSpec:
    """A store's name and engine: ``"memory"`` or ``"sqlite"`` (persistent)."""

    name: str = attrs.field()
    kind: str = attrs.field(default="memory")
    logged: bool = True

    @name.validator
    def _name(self, _a: object, value: str) -> None:
        if not isinstance(value, str) or not value or "/" in value:
            raise ValueError(f"a store name must be a non-empty str without '/', got {value!r}")

    @kind.validator
    def _kind(self, _a: object, value: str) -> None:
        if value not in ("memory", "sqlite"):
            raise ValueError(f'store kind must be "memory" or "sqlite", got {value!r}')


def _k(key: Any) -> bytes:
    data = json_serializer(key)
    if data is None:
        raise ValueError("a store key cannot be None")
    return data


def _hashable(obj: Any) -> Any:
    return tuple(_hashable(x) for x in obj) if isinstance(obj, list) else obj


class KeyValueStore:
    """Common behaviour: JSON encoding and the dirty set the changelog is written from."""

    name: str

    def __init__(self, name: str) -> None:
        self.name = name
        self.dirty: dict[bytes, bytes | None] = {}

    # raw access, implemented by engines
    def _get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def _put(self, key: bytes, value: bytes | None) -> None:
        raise NotImplementedError

    def _items(self) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    def get(self, key: Any) -> Any:
        return json_deserializer(self._get(_k(key)))

    def put(self, key: Any, value: Any) -> None:
        """Set ``key``; a None value deletes it."""
        kb, vb = _k(key), json_serializer(value)
        self._put(kb, vb)
        self.dirty[kb] = vb

    def delete(self, key: Any) -> None:
        self.put(key, None)

    def all(self) -> dict[Any, Any]:
        """Every entry; list keys (windowed ``[key, start]``) come back as tuples."""
        return {_hashable(json_deserializer(k)): json_deserializer(v) for k, v in self._items()}

    def restore(self, key: bytes, value: bytes | None) -> None:
        """Apply one changelog record (not marked dirty)."""
        self._put(key, value)

    def take_dirty(self) -> dict[bytes, bytes | None]:
        out, self.dirty = self.dirty, {}
        return out

    def clear(self) -> None:
        raise NotImplementedError

    def checkpoint(self, changelog_offset: int, positions: dict[str, int] | None,
                   epoch: int | None = None) -> None:
        """The local data now equals the valid state of the changelog through
        ``changelog_offset``, reflecting input ``positions``, as judged by a task of fencing
        ``epoch`` that accounted for every record up to there: make it durable locally
        (no-op in memory)."""

    def local_checkpoint(self) -> tuple[int, dict[str, int] | None, int | None] | None:
        """(changelog offset, positions, epoch) the local data equals, or None: restore
        from the start of the changelog (also when the epoch is None: a file written before
        fencing, which cannot be checked against the changelog's fences)."""
        return None

    def close(self) -> None:
        pass


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
        self._data.clear()
        self.dirty.clear()


class SqliteStore(KeyValueStore):
    """One SQLite file per task and store; WAL journal, synchronous=NORMAL: the changelog,
    not the local file, is the durable copy, so losing the last local writes is harmless.
    Each changelog write commits the local transaction with the changelog offset it
    matches, so a later restore on this machine replays only the changelog after it."""

    def __init__(self, name: str, path: str | os.PathLike[str]) -> None:
        super().__init__(name)
        os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
        self._db = sqlite3.connect(os.fspath(path), check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        self._db.commit()

    def _get(self, key: bytes) -> bytes | None:
        row = self._db.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def _put(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self._db.execute("DELETE FROM kv WHERE k = ?", (key,))
        else:
            self._db.execute("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", (key, value))

    def _items(self) -> Iterator[tuple[bytes, bytes]]:
        for k, v in self._db.execute("SELECT k, v FROM kv ORDER BY k").fetchall():
            yield bytes(k), bytes(v)

    def clear(self) -> None:
        self._db.execute("DELETE FROM kv")
        self._db.execute("DELETE FROM meta")
        self._db.commit()
        self.dirty.clear()

    def checkpoint(self, changelog_offset: int, positions: dict[str, int] | None,
                   epoch: int | None = None) -> None:
        """Commit the local transaction together with the changelog offset it matches:
        writes not yet in the changelog stay uncommitted, so the file never runs ahead."""
        meta = json.dumps({"offset": changelog_offset, "positions": positions, "epoch": epoch})
        self._db.execute("INSERT OR REPLACE INTO meta (k, v) VALUES ('checkpoint', ?)", (meta,))
        self._db.commit()

    def local_checkpoint(self) -> tuple[int, dict[str, int] | None, int | None] | None:
        row = self._db.execute("SELECT v FROM meta WHERE k = 'checkpoint'").fetchone()
        if row is None:
            return None
        meta = json.loads(row[0])
        return int(meta["offset"]), meta["positions"], meta.get("epoch")

    def close(self) -> None:
        self._db.rollback()  # what the changelog does not have must not survive locally
        self._db.close()
