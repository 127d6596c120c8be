"""Ports for servers whose address must be known before they start."""

from __future__ import annotations

import socket

from logmarshal._ports import _ephemeral_low, free_port


def test_ports_are_below_the_range_outgoing_connections_take_theirs_from() -> None:
    """A listener's port from bind(0) could be taken by any outgoing connection (one Kafka
    node dialling another still starting) before the listener binds it: a 3-node cluster's
    node exited at start-up in CI (stop 61)."""
    low = _ephemeral_low()
    ports = {free_port() for _ in range(50)}
    assert all(1024 < p < low for p in ports) and len(ports) > 40
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_picked_already_is_never_picked_again(monkeypatch) -> None:
    """Each port is only free when picked, not bound until its server starts: a 3-node
    Kafka in CI got one port twice (node 1's controller's, node 3's broker's), and node 3
    exited at start-up (stop 77). The picks here are forced to repeat."""
    import random

    picks = iter([20_001, 20_001, 20_001, 20_002])
    monkeypatch.setattr(random.SystemRandom, "randrange", lambda self, a, b: next(picks))
    first = free_port()
    assert first == 20_001
    assert free_port(taken=[first]) == 20_002
