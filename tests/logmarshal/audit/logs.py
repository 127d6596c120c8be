"""Coordination logs for the audit tests: scripted ones with exact log times, random ones.

Records are encoded with the rationalizer's codec and, when a cluster is given, produced to
``__marshal`` (LogAppendTime) with the log's clock set to the scripted time, so the export
reads back exactly what the script says.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.marshaler import COORDINATION_TOPIC, coordination_topic_config
from rationalizer import (
    AnnouncingMember,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    HeartbeatingTask,
    LeavingGroup,
    NamingTenure,
    ReleaseGroup,
    ReleasingPartition,
    ReleasingTask,
    coordination_partition,
    encode,
    membership_partition,
)
from rationalizer._messages import FUTURE_VERSIONS

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

    def task_beat(
        self,
        who: str,
        p: int,
        positions: tuple[tuple[str, int], ...],
        t: int,
        *,
        group: str | None = None,
        hb: int = HB,
    ) -> int:
        """HeartbeatingTask (version 3) on the key of partition ``p`` of the script's topic
        (here the task's name): the holder's position in each source topic."""
        msg = HeartbeatingTask(
            **self._ids(who, group),
            topic=self.topic,
            partition=p,
            heartbeat_interval_ms=hb,
            positions=positions,
        )
        return self.put(msg, t)

    def name(self, who: str, p: int, t: int, *, group: str | None = None) -> int:
        """NamingTenure (version 9): ``who`` names its tenure of partition ``p``."""
        return self.put(NamingTenure(**self._ids(who, group), topic=self.topic, partition=p), t)

    def task_release(
        self,
        who: str,
        p: int,
        positions: tuple[tuple[str, int], ...],
        t: int,
        *,
        group: str | None = None,
    ) -> int:
        """ReleasingTask (version 3) on the key of partition ``p``."""
        msg = ReleasingTask(
            **self._ids(who, group), topic=self.topic, partition=p, positions=positions
        )
        return self.put(msg, t)

    def claim_messages(
        self, who: str, p: int, through: int, t: int, *, group: str | None = None
    ) -> int:
        msg = ClaimingMessages(
            **self._ids(who, group), topic=self.topic, partition=p, proposed_last_offset=through
        )
        return self.put(msg, t)

    def announce(
        self,
        who: str,
        t: int,
        *,
        topics: tuple[tuple[str, int], ...] | None = None,
        group: str | None = None,
        hb: int = HB,
        weight: int = 1,
    ) -> int:
        """AnnouncingMember (version 2) to the group's membership partition."""
        ids = self._ids(who, group)
        msg = AnnouncingMember(
            **ids,
            topics=topics if topics is not None else ((self.topic, 3),),
            heartbeat_interval_ms=hb,
            weight=weight,
        )
        key, value = encode(msg)
        return self.raw(membership_partition(ids["group_id"], self.n), t, key, value)

    def leave(self, who: str, t: int, *, group: str | None = None) -> int:
        ids = self._ids(who, group)
        key, value = encode(LeavingGroup(**ids))
        return self.raw(membership_partition(ids["group_id"], self.n), t, key, value)

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


def _vector(rng: random.Random) -> tuple[tuple[str, int], ...]:
    sources = sorted(rng.sample(("left", "right", "third"), rng.randint(1, 3)))
    return tuple((source, rng.randrange(-1, 300)) for source in sources)


def random_log(
    rng: random.Random,
    script: Script,
    steps: int,
    partitions: int = 4,
    *,
    tasks: float = 0.0,
    names: float = 0.0,
) -> None:
    """A random but plausible fleet: claims, beats, releases, restarts, resets, junk.

    With ``tasks`` > 0, that share of the holders' heartbeats and releases are a task's
    (HeartbeatingTask, ReleasingTask, version 3) on the same keys; with ``names`` > 0, that
    share of the steps is a NamingTenure (version 9); with 0 the log is what it always was
    for a seed (no extra draws)."""
    clients = [f"c{i}" for i in range(4)]
    instance = dict.fromkeys(clients, 1)
    t = 0
    for _ in range(steps):
        t += rng.choice((0, 1, 50, 300, 900, 1500, 2500))
        p = rng.randrange(partitions)
        c = rng.choice(clients)
        who = f"{c}:{instance[c]}"
        if names > 0 and rng.random() < names:
            script.name(who, p, t)
            continue
        r = rng.random()
        task = tasks > 0 and 0.25 <= r < 0.78 and rng.random() < tasks
        if r < 0.25:
            script.claim(who, p, t)
        elif r < 0.7 and task:
            script.task_beat(who, p, _vector(rng), t)
        elif r < 0.7:
            script.beat(who, p, rng.randrange(-1, 500), t)
        elif r < 0.78 and task:
            script.task_release(who, p, _vector(rng), t)
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
            script.raw(rng.randrange(script.n), t, b"x", _junk(rng))
        else:  # another group on the same coordination partitions
            script.claim(who, p, t, group="other")


def fleet_log(
    rng: random.Random, script: Script, steps: int, partitions: int = 6, *, tasks: float = 0.0
) -> None:
    """A steady fleet, as production logs are: holders renew their claims in long runs
    (heartbeats and AMO reservations, a share ``tasks`` of them a task's), and between the
    runs the rare events: lost races, clean releases and re-claims, holders that go silent
    past 2·HB and are taken over, restarts that fence the old instance (which writes once
    more), a reservation below the last one, admin resets with a position, junk, another
    group and heartbeats from non-holders. Who holds what is asked of a WorldState that
    replays the log as it is written, so the holders' writes are accepted."""
    from rationalizer import WorldState

    clients = [f"c{i}" for i in range(5)]
    instance = dict.fromkeys(clients, 1)
    worlds = {cp: WorldState() for cp in range(script.n)}
    applied = dict.fromkeys(range(script.n), 0)
    position = dict.fromkeys(range(partitions), 0)
    silent = dict.fromkeys(range(partitions), -1)
    t = 0

    def holder(p: int) -> str | None:
        cp = script.cp(p)
        worlds[cp].apply_many(script.records[cp][applied[cp] :])
        applied[cp] = len(script.records[cp])
        h = worlds[cp].holder(script.group, script.topic, p)
        return None if h is None else f"{h[0]}:{h[1]}"

    for _ in range(steps):
        t += rng.choice((0, 1, 20, 50, 100, 150))
        p = rng.randrange(partitions)
        if t < silent[p]:
            continue
        h = holder(p)
        r = rng.random()
        if h is None or r < 0.01:  # a claim (a lost race when somebody holds it)
            c = rng.choice(clients)
            script.claim(f"{c}:{instance[c]}", p, t)
            continue
        if rng.random() < 0.3:
            position[p] += rng.randrange(1, 20)
        pos = position[p]
        if r < 0.8:
            if tasks and rng.random() < tasks:
                script.task_beat(h, p, (("left", pos), ("right", rng.randrange(5))), t)
            else:
                script.beat(h, p, pos, t, hb=rng.choice((1000, 1000, 700)))
        elif r < 0.9:
            position[p] += 5
            script.claim_messages(h, p, pos + 5, t)
        elif r < 0.91:
            script.claim_messages(h, p, max(-1, pos - 50), t)  # a regression
        elif r < 0.94:
            if tasks and rng.random() < tasks:
                script.task_release(h, p, (("left", pos),), t)
            else:
                script.release(h, p, pos, t)
        elif r < 0.95:  # the holder goes silent; whoever claims next takes it over
            silent[p] = t + rng.choice((1500, 2100, 2600))
        elif r < 0.965:  # a restart: the new instance takes its claims back, the old writes
            c = h.split(":")[0]
            instance[c] += 1
            script.beat(f"{c}:{instance[c]}", p, pos, t)
            script.beat(h, p, pos, t + 1)
        elif r < 0.97:
            script.release_group("admin:1", t + rng.choice((0, 400, 1500)), t)
            script.beat("admin:1", p, rng.randrange(-1, 200), t)
        elif r < 0.98:
            script.raw(rng.randrange(script.n), t, b"x", _junk(rng))
        elif r < 0.99:
            script.claim(f"{rng.choice(clients)}:1", p, t, group="other")
        else:  # a heartbeat from somebody who does not hold it
            c = rng.choice(clients)
            script.beat(f"{c}:{instance[c]}", p, pos, t)


class RebalanceStory:
    """A group that rebalances through the log (protocol version 2), at exact log times,
    HB = 1 s, members announcing every 300 ms and holders beating every 300 ms:

    - 0: a joins (counted at 300) and claims partitions 0, 1, 2 at 310;
    - 1000: c joins (counted at 1500); a gives partition 2 up at 1510, c claims it at 1520;
    - 2000: b joins (counted at 2400); a gives partition 1 up at 2410, b claims it at 2420;
    - 3000: c releases partition 2, says LeavingGroup at 3010; a claims it at 3020;
    - 3300: b crashes (last announcement and heartbeat); its membership expires at 5301,
      a takes partition 1 over (stale) at 5400;
    - 6000: a announces 4 partitions (the topic grew) and claims partition 3 at 6010.

    ``run(until)`` writes everything up to log time ``until`` (call it with growing times),
    so a test can look at the log half way.
    """

    CHANGES: ClassVar[dict[int, list[tuple[str, str, int | None]]]] = {
        310: [("claim", "a:1", 0), ("claim", "a:1", 1), ("claim", "a:1", 2)],
        1510: [("release", "a:1", 2)],
        1520: [("claim", "c:1", 2)],
        2410: [("release", "a:1", 1)],
        2420: [("claim", "b:1", 1)],
        3000: [("release", "c:1", 2)],
        3010: [("leave", "c:1", None)],
        3020: [("claim", "a:1", 2)],
        5400: [("claim", "a:1", 1)],
        6010: [("claim", "a:1", 3)],
    }
    JOIN: ClassVar[dict[str, int]] = {"a:1": 0, "c:1": 1000, "b:1": 2000}
    GONE: ClassVar[dict[str, int]] = {
        "c:1": 3010,
        "b:1": 3300,
    }  # last announcement/heartbeat at or before this
    END = 6600

    def __init__(self, script: Script) -> None:
        self.s = script
        self.t = -1
        self.held: dict[int, str] = {}
        self.position = 0

    def _topics(self, t: int) -> tuple[tuple[str, int], ...]:
        return ((self.s.topic, 4 if t >= 6000 else 3),)

    def _events(self) -> list[tuple[int, int, str, str, int | None]]:
        out: list[tuple[int, int, str, str, int | None]] = []
        for who, join in self.JOIN.items():
            gone = self.GONE.get(who, self.END)
            for t in [join, *range(join - join % 300 + 300, gone + 1, 300)]:
                if t <= gone and (who != "c:1" or t < 3000):
                    out.append((t, 0, "announce", who, None))
        out.append((6000, 0, "announce", "a:1", None))
        for t in range(300, self.END + 1, 300):
            out.append((t, 1, "beat", "", None))
        for t, actions in self.CHANGES.items():
            for i, (what, who, p) in enumerate(actions):
                out.append((t, 2 + i, what, who, p))
        return sorted(set(out), key=lambda e: (e[0], e[1], e[3], e[4] or 0))

    def run(self, until: int) -> None:
        s = self.s
        for t, _order, what, who, p in self._events():
            if t <= self.t or t > until:
                continue
            if what == "announce":
                s.announce(who, t, topics=self._topics(t))
            elif what == "beat":
                for part, holder in sorted(self.held.items()):
                    if t <= self.GONE.get(holder, self.END):
                        self.position += 1
                        s.beat(holder, part, self.position, t)
            elif what == "claim":
                assert p is not None
                s.claim(who, p, t)
                self.held[p] = who
            elif what == "release":
                assert p is not None
                self.position += 1
                s.release(who, p, self.position, t)
                del self.held[p]
            else:
                s.leave(who, t)
        self.t = until


def _junk(rng: random.Random) -> bytes:
    """Eight random bytes that are no coordination record. Never byte 0 of a version to
    come: up to version 5 that stopped the replay; since version 6 such bytes without an
    envelope are skipped too (tests/logmarshal/audit/test_halted_group.py), but the seeded logs of
    these tests stay as they were."""
    junk = bytes(rng.randrange(256) for _ in range(8))
    return bytes((junk[0] | 0x80,)) + junk[1:] if junk[0] in FUTURE_VERSIONS else junk
