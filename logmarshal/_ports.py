"""Loopback ports for servers this code starts whose address must be known before they run
(a Kafka node, a Spark master, a broker process restarted on its own port)."""

from __future__ import annotations

import random
import socket
from collections.abc import Collection
from pathlib import Path

__all__ = ["free_port", "free_ports"]


def free_port(taken: Collection[int] = ()) -> int:
    """A loopback port nobody listens on now, below the kernel's ephemeral range, and not
    one of ``taken`` (ports picked for servers not listening yet: a 3-node Kafka in CI got
    one port twice, node 1's controller's and node 3's broker's, and node 3 exited).

    A port from ``bind(0)`` lies in that range, where the kernel also picks the local port
    of every outgoing connection: a node dialling one still starting, or a client, can take
    it before its listener binds it, and the node then exits at start-up (a 3-node Kafka
    cluster in CI, stop 61), or cannot come back on it after a kill. Below the range only
    listeners take ports."""
    low = _ephemeral_low()
    pick = random.SystemRandom()
    for _ in range(100):
        port = pick.randrange(_PORTS_FROM, low) if low - _PORTS_FROM >= 1000 else 0
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            got = int(s.getsockname()[1])
            if got not in taken:  # (bind(0)'s pick, when the range is too small)
                return got
    raise OSError("no free loopback port below the ephemeral range after 100 tries")


def free_ports(count: int) -> list[int]:
    """``count`` free ports, no two alike (each is only free when picked, not yet bound)."""
    ports: list[int] = []
    for _ in range(count):
        ports.append(free_port(taken=ports))
    return ports


_PORTS_FROM = 10_000


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 elsewhere)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
