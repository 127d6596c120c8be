from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from logmarshal import EmbeddedCluster
from logmarshal.streams import InMemoryStore, KeyValueStore, RocksDBStore, SqliteStore


@pytest.fixture
def cluster(tmp_path) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as opened:
        yield opened


#: the engines that keep a store on local disk: every contract a persistent store has is
#: tested over each of them
PERSISTENT_KINDS = ("sqlite", "rocksdb")


def open_store(kind: str, name: str, directory) -> KeyValueStore:
    """A store of engine ``kind`` named ``name``, its file (or directory) in ``directory``."""
    if kind == "memory":
        return InMemoryStore(name)
    path = Path(directory) / f"{name}.{kind}"
    return SqliteStore(name, path) if kind == "sqlite" else RocksDBStore(name, path)


@attrs.frozen
class StateDirs:
    """Where the machines of a test keep their local stores, and in which engine."""

    root: Path
    kind: str

    def store(self, where: str, name: str) -> KeyValueStore:
        return open_store(self.kind, name, self.root / where)


@pytest.fixture(params=PERSISTENT_KINDS)
def state(request, tmp_path) -> StateDirs:
    return StateDirs(tmp_path, request.param)
