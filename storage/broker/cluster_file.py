"""The static cluster file: which brokers exist, and which one leads each partition.

Format: one broker per line, ``ID HOST:PORT``; blank lines and ``#`` comments are ignored::

    # id  address
    1     127.0.0.1:9092
    2     127.0.0.1:9093

Placement is a pure function of the file, so every broker (and every restart) agrees on
it without talking: partition ``p`` of ``topic`` is led by the broker at position
``(crc32(topic) + p) % n`` of the id-sorted list (round-robin from a per-topic start, so
one-partition topics do not all land on the first broker). Nothing is replicated: each
partition lives on its leader only. The controller (which creates and deletes topics) is
the broker with the lowest id.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence

import attrs

__all__ = ["BrokerAddress", "ClusterLayout", "load_cluster_file", "parse_host_port"]


def parse_host_port(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``, or ``:port``) into its parts; ValueError if malformed."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    host = host.strip("[]") or default_host
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"port in {text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} in {text!r} is out of range")
    return host, port


@attrs.frozen
class BrokerAddress:
    node_id: int
    host: str
    port: int


@attrs.frozen
class ClusterLayout:
    """The brokers of a cluster and this broker's place in it."""

    brokers: tuple[BrokerAddress, ...]
    self_id: int

    def __attrs_post_init__(self) -> None:
        ids = [b.node_id for b in self.brokers]
        if not ids:
            raise ValueError("a cluster needs at least one broker")
        if len(set(ids)) != len(ids):
            raise ValueError(f"broker ids must be unique, got {ids}")
        if self.self_id not in ids:
            raise ValueError(f"broker id {self.self_id} is not in the cluster ({ids})")

    @classmethod
    def single(cls, node_id: int, host: str, port: int) -> ClusterLayout:
        return cls((BrokerAddress(node_id, host, port),), node_id)

    @property
    def sorted_brokers(self) -> tuple[BrokerAddress, ...]:
        return tuple(sorted(self.brokers, key=lambda b: b.node_id))

    @property
    def controller_id(self) -> int:
        return min(b.node_id for b in self.brokers)

    @property
    def is_controller(self) -> bool:
        return self.self_id == self.controller_id

    @property
    def me(self) -> BrokerAddress:
        return next(b for b in self.brokers if b.node_id == self.self_id)

    @property
    def controller(self) -> BrokerAddress:
        return next(b for b in self.brokers if b.node_id == self.controller_id)

    def leader(self, topic: str, partition: int) -> int:
        ordered = self.sorted_brokers
        if len(ordered) == 1:
            return ordered[0].node_id
        start = zlib.crc32(topic.encode("utf-8"))
        return ordered[(start + partition) % len(ordered)].node_id

    def leads(self, topic: str, partition: int) -> bool:
        return self.leader(topic, partition) == self.self_id

    def with_self_address(self, host: str, port: int) -> ClusterLayout:
        """The same layout with this broker's advertised address replaced (after binding port 0)."""
        brokers = tuple(
            BrokerAddress(b.node_id, host, port) if b.node_id == self.self_id else b
            for b in self.brokers
        )
        return ClusterLayout(brokers, self.self_id)


def parse_cluster_file(text: str, source: str = "<cluster file>") -> list[BrokerAddress]:
    brokers: list[BrokerAddress] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"{source}:{number}: expected 'ID HOST:PORT', got {raw.strip()!r}")
        try:
            node_id = int(fields[0])
        except ValueError:
            raise ValueError(
                f"{source}:{number}: broker id {fields[0]!r} is not a number"
            ) from None
        if node_id < 0:
            raise ValueError(f"{source}:{number}: broker id must be >= 0")
        try:
            host, port = parse_host_port(fields[1])
        except ValueError as exc:
            raise ValueError(f"{source}:{number}: {exc}") from None
        brokers.append(BrokerAddress(node_id, host, port))
    if not brokers:
        raise ValueError(f"{source}: no brokers listed")
    return brokers


def load_cluster_file(path: str | os.PathLike[str], self_id: int) -> ClusterLayout:
    """Read a cluster file; ValueError (naming file and line) if it is malformed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return ClusterLayout(tuple(parse_cluster_file(text, os.fspath(path))), self_id)


def format_cluster_file(brokers: Sequence[BrokerAddress]) -> str:
    """The text of a cluster file listing ``brokers`` (tests and scenarios write these)."""
    return "".join(f"{b.node_id} {b.host}:{b.port}\n" for b in brokers)
