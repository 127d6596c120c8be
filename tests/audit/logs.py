"""Coordination logs for the audit tests: scripted ones with exact log times, random ones.

Records are encoded with the rationalizer's codec and, when a cluster is given, produced to
``__marshal`` (LogAppendTime) with the log's clock set to the scripted time, so the export
reads back exactly what the script says.
"""

from __future__ import annotations

import random
from typing import Any

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.marshaler import COORDINATION_TOPIC, coordination_topic_config
from rationalizer import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    ReleaseGroup,
    ReleasingPartition,
    coordination_partition,
    encode,
)

HB = 1000
GROUP = "g"
TOPIC = "events"

Record = tuple[int, int, bytes | None, bytes | None]


class LogClock:
    """The embedded cluster's log-append clock, set by the script."""

    def __init__(self, start_ms: int = 0) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms


class Script:
    """Writes coordination records at chosen log times; keeps them per partition too."""

    def __init__(
        self,
        n: int = 4,
        *,
        cluster: EmbeddedCluster | None = None,
        clock: LogClock | None = None,
        base_ms: int = 1_700_000_000_000,
        group: str = GROUP,
        topic: str = TOPIC,
    ) -> None:
        self.n = n
        self.cluster = cluster
        self.clock = clock
        self.base = base_ms
        self.group = group
        self.topic = topic
        self.records: dict[int, list[Record]] = {cp: [] for cp in range(n)}
        if cluster is not None:
            cluster.create_topic(COORDINATION_TOPIC, n, coordination_topic_config())

    def cp(self, partition: int, topic: str | None = None) -> int:
        return coordination_partition(topic or self.topic, partition, self.n)

    def raw(self, cp: int, t: int, key: bytes | None, value: bytes | None) -> int:
        """Append one record at base+t ms to coordination partition ``cp``; its offset."""
        ts = self.base + t
        offset = len(self.records[cp])
        if self.cluster is not None:
            assert self.clock is not None
            self.clock.now_ms = ts
            result = self.cluster.produce(
                COORDINATION_TOPIC, cp, [NewRecord(value=value, key=key, timestamp=ts)]
            )
            assert result.base_offset == offset
        self.records[cp].append((offset, ts, key, value))
        return offset

    def put(self, msg: Any, t: int) -> int:
        key, value = encode(msg)
        return self.raw(self.cp(msg.partition, msg.topic), t, key, value)

    def _ids(self, who: str, group: str | None) -> dict[str, str]:
        client, instance = who.split(":")
        return {"client_id": client, "instance_id": instance, "group_id": group or self.group}

    def claim(self, who: str, p: int, t: int, *, group: str | None = None, hb: int = HB) -> int:
        msg = ClaimingPartition(
            **self._ids(who, group), topic=self.topic, partition=p, heartbeat_interval_ms=hb
        )
        return self.put(msg, t)

    def beat(
        self, who: str, p: int, last: int, t: int, *, group: str | None = None, hb: int = HB
    ) -> int:
        msg = Heartbeat(
            **self._ids(who, group),
            topic=self.topic,
            partition=p,
            last_offset=last,
            heartbeat_interval_ms=hb,
        )
        return self.put(msg, t)

    def release(self, who: str, p: int, last: int, t: int, *, group: str | None = None) -> int:
        msg = ReleasingPartition(
            **self._ids(who, group), topic=self.topic, partition=p, last_offset=last
        )
        return self.put(msg, t)

    def claim_messages(
        self, who: str, p: int, through: int, t: int, *, group: str | None = None
    ) -> int:
        msg = ClaimingMessages(
            **self._ids(who, group), topic=self.topic, partition=p, proposed_last_offset=through
        )
        return self.put(msg, t)

    def release_group(self, who: str, expires: int, t: int, *, group: str | None = None) -> None:
        key, value = encode(
            ReleaseGroup(**self._ids(who, group), msg_expire_time=self.base + expires)
        )
        for cp in range(self.n):
            self.raw(cp, t, key, value)


def story(script: Script) -> dict[str, Any]:
    """Failover, handoff, restart, reset (pause) and misbehaviour, at exact log times.

    Returns the offsets of the records the tests point at.
    """
    s = script
    at: dict[str, Any] = {}
    at["a_claim"] = s.claim("a:1", 0, 0)  # p0: a claims
    s.claim("c:1", 1, 0)  # p1: c claims (handed off later)
    s.claim("e:1", 2, 0)  # p2: e claims (restarted later)
    s.beat("a:1", 0, 9, 100)
    s.beat("c:1", 1, 4, 400)
    at["b_lost_race"] = s.claim("b:1", 0, 500)  # a is fresh: b loses the race
    s.beat("e:1", 2, 2, 500)
    s.beat("a:1", 0, 19, 600)  # a's last sign of life
    at["c_release"] = s.release("c:1", 1, 7, 800)  # clean handoff...
    at["e_restart"] = s.beat("e:2", 2, 3, 900)  # e restarts while fresh: e:1 fenced
    at["d_claim"] = s.claim("d:1", 1, 1000)  # ...to d
    at["e_zombie"] = s.beat("e:1", 2, 4, 1000)  # the fenced instance keeps writing
    s.beat("d:1", 1, 9, 1500)
    s.beat("e:2", 2, 5, 1700)
    at["b_takeover"] = s.claim("b:1", 0, 3000)  # a stale (2400 ms > 2 HB): b takes p0
    at["a_zombie"] = s.beat("a:1", 0, 25, 3100)  # a wakes up and beats without a claim
    s.beat("b:1", 0, 30, 3500)
    s.beat("b:1", 0, 40, 4300)  # a gap of 800 ms
    # the admin resets the group: every claim voided, paused until 7000, p0 set to 100
    s.release_group("admin:x", 7000, 5000)
    at["admin_position"] = s.beat("admin:x", 0, 100, 5100)
    at["b_paused"] = s.beat("b:1", 0, 41, 5200)
    at["f_claim"] = s.claim("f:1", 0, 7500)
    s.claim_messages("f:1", 0, 150, 7600)
    at["f_regression"] = s.claim_messages("f:1", 0, 120, 7700)
    s.beat("f:1", 0, 150, 7800)
    at["garbage_cp"] = s.cp(3)
    at["garbage"] = s.raw(s.cp(3), 7900, b"junk", b"\x01\x09not a record")
    return at


def random_log(rng: random.Random, script: Script, steps: int, partitions: int = 4) -> None:
    """A random but plausible fleet: claims, beats, releases, restarts, resets, junk."""
    clients = [f"c{i}" for i in range(4)]
    instance = dict.fromkeys(clients, 1)
    t = 0
    for _ in range(steps):
        t += rng.choice((0, 1, 50, 300, 900, 1500, 2500))
        p = rng.randrange(partitions)
        c = rng.choice(clients)
        who = f"{c}:{instance[c]}"
        r = rng.random()
        if r < 0.25:
            script.claim(who, p, t)
        elif r < 0.7:
            script.beat(who, p, rng.randrange(-1, 500), t)
        elif r < 0.78:
            script.release(who, p, rng.randrange(-1, 500), t)
        elif r < 0.88:
            script.claim_messages(who, p, rng.randrange(-1, 500), t)
        elif r < 0.93:
            instance[c] += 1
            script.beat(f"{c}:{instance[c]}", p, rng.randrange(-1, 500), t)
        elif r < 0.95:
            script.release_group("admin:1", t + rng.choice((0, 500, 3000)), t)
        elif r < 0.97:
            script.beat("admin:1", p, rng.randrange(-1, 500), t)
        elif r < 0.98:
            script.raw(
                rng.randrange(script.n), t, b"x", bytes(rng.randrange(256) for _ in range(8))
            )
        else:  # another group on the same coordination partitions
            script.claim(who, p, t, group="other")
