"""The simulator's bounded-log schedule (issue 36 item 4; PROTOCOL.md, "Bounded coordination
log"): another group of another replay configuration shares the coordination partitions,
snapshots are published and the log truncated by members of both configurations, and
members cold-start (or thaw) after a truncation.

- The checked group ``g`` is keyed or not (drawn per seed); the other group ``u`` is the
  other way round, so the two replay configurations differ. ``u`` is one busy writer: it
  heartbeats its partitions (one in every coordination partition), keeps a replay of its
  own configuration, publishes a snapshot when its record lands on a snapshot point (every
  ``SNAP_EVERY`` records) and truncates.
- ``g``'s members announce their configuration when they start (before their replay reads
  anything) and every ttl/4 while they run (ttl 3, 5, 10 or 40 HB: a freeze can outlast it); a
  share of them publish: once caught up and every ``keep_every``, when ``u``'s snapshots
  cover more than ``g``'s and ``g`` has fewer than two or its newest lags by
  ``SNAP_EVERY``, they publish their world and truncate.
- A truncator reads the snapshot topic and computes its bound with the real
  :func:`logmarshal._coordlog.truncation_bounds` at one instant and deletes up to 3·HB later
  (the race of the proof sketch, point 5).
- A cold start restores the newest valid snapshot of its own configuration with the real
  :func:`logmarshal._coordlog.load_snapshot`, else starts at the log start; a replay that
  fell below the log start restores one that reaches it. When none does: with the
  cold-start refusal, ``Halted(gap)`` (an operator then resets the group, as
  docs/bounded-log.md says, and the member takes up what the reset positioned once its
  pause is over: ``Regained`` → ``Resumed``); without it the replay goes on from the log
  start as if nothing were missing.

The invariant judged here (the rule's guarantee): a truncation decided while some member of
``g`` was announced (or, without announcements, would have been: started and run within the
ttl) leaves ``g`` either the whole log or a valid snapshot of its own that reaches the new
log start. The other checks (two holders at once, AMO repeats, ALO completeness) judge what
the members do. ``--without announce`` removes the announcements, ``--without
gap-refusal`` the cold-start refusal.

Restoring only snapshots of one's own replay configuration guarantees more, and that is
judged too: a restored world is the world of a full replay of the log through the offset
it covers (:meth:`Bounded._as_the_log`), and the replay that goes on from it judges every
record as the full replay did (:meth:`Bounded.agree`). ``--without snapshot-rules`` (rule 1,
:mod:`scenarios.sim_upgrade`) restores snapshots of any rules.
"""

from __future__ import annotations

import random
from typing import Any

import attrs

from logmarshal import _coordlog as coordlog
from logmarshal.core import Halted, Resumed
from logmarshal.core.rewind import Regained
from rationalizer import (
    PROTOCOL_VERSION,
    ClaimingPartition,
    Heartbeat,
    ReleaseGroup,
    WorldState,
    coordination_partition,
    decode,
    encode,
    sign,
)
from rationalizer._snapshot_record import (
    config_fingerprint,
    encode_announcement,
    encode_snapshot_record,
    parse_snapshot_record,
)

from .sim_upgrade import load_any_rules

# scenarios.sim's Sim and _Instance are not imported, not even for type checking: sim
# imports this module, and the import graph allows no circle (tests/house). ``Sim`` and
# ``_Instance`` below are those types, spelled as aliases of Any.
Sim = Any
_Instance = Any

__all__ = ["Bounded"]

KEY_G = bytes(range(32))
KEY_U = bytes(range(1, 33))
OTHER_GROUP = "u"
OTHER_TOPIC = "ut"
#: records of a coordination partition between two snapshot points of ``u``
SNAP_EVERY = 20

Record = tuple[int, bytes | None, bytes | None]


class Bounded:
    """The bounded-log state of one seed: log starts, the snapshot topic, ``u``'s writer."""

    def __init__(self, sim: Sim, rng: random.Random, hb: int) -> None:
        self.sim = sim
        self.rng = rng
        self.hb = hb
        keyed = rng.random() < 0.5
        self.g_keys: dict[str, bytes] = {"g": KEY_G} if keyed else {}
        self.u_keys: dict[str, bytes] = {} if keyed else {OTHER_GROUP: KEY_U}
        self.ttl = rng.choice((3, 5, 10, 40)) * hb
        self.delay = rng.choice((0, hb, 3 * hb))
        self.keep_every = rng.choice((3, 10)) * hb
        self.p_publisher = rng.choice((0.0, 0.5, 1.0))
        if sim.upgrade is not None:  # an upgrade seed has publishers of every version
            self.p_publisher = max(self.p_publisher, 0.5)
        self.u_period = rng.choice((5, 15, 30))
        #: the group stops (its members killed, or one frozen) and comes back after a
        #: downtime around the ttl: its cold starts may come after a truncation
        self.outage_at = (
            rng.randint(2 * hb, max(2 * hb, sim.fault_ms - hb)) if rng.random() < 0.7 else None
        )
        n = sim.ncoord
        #: the log start of each coordination partition (records below it are deleted)
        self.start = [0] * n
        #: the snapshot topic: (offset, key, value) per partition, and its start
        self.topic: list[list[Record]] = [[] for _ in range(n)]
        self.topic_start = [0] * n
        self.u_worlds = [WorldState(admin_keys=self.u_keys) for _ in range(n)]
        self.u_applied = [-1] * n
        self.u_parts: list[int] = []
        self.u_pos: dict[int, int] = {}
        #: instance -> when it (would have) announced last; published / gaps / resets
        self.announced: dict[tuple[str, str], int] = {}
        self.publishers: set[tuple[str, str]] = set()
        self.keep_at: dict[tuple[tuple[str, str], int], int] = {}
        self.cold: dict[tuple[str, str], set[int]] = {}
        self.regained: dict[tuple[tuple[str, str], int], Regained] = {}
        self.reset_pending = False
        #: per coordination partition, where the last operator reset's ReleaseGroup landed:
        #: a member that finds a gap below it takes up what it positioned (no new reset)
        self.last_reset: list[int] = [-1] * n
        #: no member of ``g`` runs before this (the outage): joins meanwhile wait
        self.down_until = 0
        self.truncations = 0
        self.gaps = 0
        #: (instance, cp) whose replay started from a snapshot -> what it said about it
        #: (:meth:`agree`); instances whose replay has a gap are not in it
        self.restored: dict[tuple[tuple[str, str], int], str] = {}
        #: (instance, cp) whose disagreement with the log's replay was reported
        self.disagreed: set[tuple[tuple[str, str], int]] = set()
        #: (cp, covered) -> the world of a full replay of the log through ``covered``
        self._full: dict[tuple[int, int], WorldState] = {}

    @property
    def mine(self) -> str:
        return config_fingerprint(self.g_keys, PROTOCOL_VERSION)

    def records(self, cp: int) -> list[Record]:
        return self.topic[cp][self.topic_start[cp] :]

    def put(self, cp: int, key: bytes, value: bytes) -> None:
        self.topic[cp].append((len(self.topic[cp]), key, value))

    # -- u, the busy writer of the other configuration ----------------------------------------

    def start_u(self) -> None:
        """``u`` claims one partition per coordination partition and starts heartbeating."""
        n = self.sim.ncoord
        seen: dict[int, int] = {}
        p = 0
        while len(seen) < n:
            seen.setdefault(coordination_partition(OTHER_TOPIC, p, n), p)
            p += 1
        self.u_parts = sorted(seen.values())
        for p in self.u_parts:
            self._u_write(
                ClaimingPartition(
                    client_id="u1",
                    instance_id="i1",
                    group_id=OTHER_GROUP,
                    topic=OTHER_TOPIC,
                    partition=p,
                    heartbeat_interval_ms=3_600_000,
                )
            )
            self.u_pos[p] = -1
        self.sim.at(self.sim.now + self.u_period, self.u_beat)

    def u_beat(self) -> None:
        sim = self.sim
        p = self.rng.choice(self.u_parts)
        self.u_pos[p] += 1
        self._u_write(
            Heartbeat(
                client_id="u1",
                instance_id="i1",
                group_id=OTHER_GROUP,
                topic=OTHER_TOPIC,
                partition=p,
                last_offset=self.u_pos[p],
                heartbeat_interval_ms=3_600_000,
            )
        )
        period = self.u_period if sim.in_faults() else 4 * self.u_period
        sim.at(sim.now + self.rng.randint(1, period), self.u_beat)

    def _u_write(self, msg: object) -> None:
        cp = coordination_partition(OTHER_TOPIC, msg.partition, self.sim.ncoord)  # type: ignore[attr-defined]
        offset = self.sim.append(cp, *encode(msg))  # type: ignore[arg-type]
        if offset > 0 and offset % SNAP_EVERY == 0:
            world = self.u_worlds[cp]
            log = self.sim.log[cp]
            for off in range(self.u_applied[cp] + 1, len(log)):
                world.apply(off, *log[off])
            self.u_applied[cp] = len(log) - 1
            self.put(cp, *encode_snapshot_record(world, cp, self.u_keys))
            self.sim.note(f"u publishes a snapshot of cp{cp} covering {world.applied_through}")
            self.truncate(cp, self.u_keys, "u")

    def outage(self) -> None:
        """Every running member of ``g`` stops (killed; one may only freeze, a zombie); the
        same clients start again after a downtime of ttl/2..2·ttl (ending before the
        faults do); members started meanwhile wait for its end."""
        sim = self.sim
        live = [i for i in sim.live() if i.state == "alive"]
        if not live:
            return
        # over before the faults end (the group then settles, and its balance is judged)
        downtime = min(
            self.rng.randint(self.ttl // 2, 2 * self.ttl), sim.fault_ms - sim.now - 2 * self.hb
        )
        if downtime <= 0:
            return
        self.down_until = sim.now + downtime
        sim.note(f"OUTAGE of {[i.me for i in live]} for {downtime} ms")
        frozen = self.rng.choice(live) if self.rng.random() < 0.3 else None
        for inst in live:
            if inst is frozen:
                sim.freeze(inst)
                sim.at(
                    sim.now + downtime + self.rng.randint(0, 2 * self.hb),
                    lambda inst=inst: sim.thaw(inst),
                )
            else:
                sim.kill(inst)
        for cid in sorted({i.client_id for i in live if i is not frozen}):
            sim.at(sim.now + downtime + self.rng.randint(0, self.hb), lambda c=cid: sim.join(c))

    # -- truncation --------------------------------------------------------------------------

    def truncate(self, cp: int, keys: dict[str, bytes], who: str) -> None:
        """Decide the bound now (the real rule), delete a little later (the race)."""
        sim = self.sim
        t0 = sim.now
        recs = self.records(cp)
        mb, sb = coordlog.truncation_bounds(cp, recs, keys, now_ms=t0)
        self._judge(cp, mb, recs, t0, who)
        if mb <= self.start[cp]:
            return

        def delete() -> None:
            if mb > self.start[cp]:
                sim.note(f"{who} TRUNCATES cp{cp} before {mb} (decided at {t0})")
                self.start[cp] = mb
                self.truncations += 1
            self.topic_start[cp] = max(self.topic_start[cp], sb)

        sim.at(t0 + (self.rng.randint(0, self.delay) if self.delay else 0), delete)

    def _judge(self, cp: int, mb: int, recs: list[Record], t0: int, who: str) -> None:
        """The rule's guarantee for ``g`` (module docstring)."""
        if mb <= 0 or not any(t + self.ttl > t0 for t in self.announced.values()):
            return
        reach = coordlog.load_snapshot(None, cp, self.g_keys, earliest=mb, snapshots=recs)
        if reach is None:
            self.sim.checks.fail_and_go_on(
                t0,
                f"{who}'s truncation of cp{cp} before {mb} leaves configuration {self.mine} "
                "of a running member without a snapshot of its own that reaches it",
            )

    # -- g's members -------------------------------------------------------------------------

    def joined(self, inst: _Instance) -> None:
        """A new instance (it announces when its replay first reads: :meth:`reachable`); one
        that starts during the outage waits for its end (frozen until then)."""
        sim = self.sim
        self.cold[inst.me] = set(range(sim.ncoord))
        if self.rng.random() < self.p_publisher:
            self.publishers.add(inst.me)
        if sim.upgrade is not None:
            sim.upgrade.joined(inst)
        if sim.now < self.down_until:
            sim.note(f"{inst.me} waits for the outage to end")
            inst.state = "frozen"
            sim.at(self.down_until + self.rng.randint(0, self.hb), lambda: sim.thaw(inst))

    def _announce(self, inst: _Instance) -> None:
        sim = self.sim
        self.announced[inst.me] = sim.now
        if not sim.announce:
            return
        for cp in range(sim.ncoord):
            self.put(
                cp,
                *encode_announcement(
                    cp, sorted(self.g_keys), written_ms=sim.now, expires_ms=sim.now + self.ttl
                ),
            )

    def housekeeping(self, inst: _Instance) -> None:
        """From an instance's replay step: renew its announcement, keep its configuration's
        snapshots current (a publisher)."""
        sim = self.sim
        if sim.now >= self.announced.get(inst.me, 0) + self.ttl // 4:
            self._announce(inst)
        if inst.me not in self.publishers:
            return
        if sim.upgrade is not None and sim.upgrade.publishes_old(inst):
            sim.upgrade.housekeeping(inst)  # an emulated publisher of an older version
            return
        for cp in range(sim.ncoord):
            key = (inst.me, cp)
            if sim.now < self.keep_at.get(key, 0) or inst.applied[cp] < 0:
                continue
            if cp in inst.gapped or cp in inst.halted:
                continue
            self.keep_at[key] = sim.now + self.keep_every
            own, others = coordlog.own_snapshots(cp, self.records(cp), self.g_keys)
            applied = inst.applied[cp]
            newest = own[0][0] if own else -1
            if others is None or newest >= others or newest >= applied:
                continue
            if len(own) >= coordlog.KEEP_SNAPSHOTS and applied - newest < SNAP_EVERY:
                continue
            self.put(cp, *encode_snapshot_record(inst.worlds[cp], cp, self.g_keys))
            sim.note(f"{inst.me} publishes a snapshot of cp{cp} covering {applied}")
            self.truncate(cp, self.g_keys, f"{inst.me}")

    def reachable(self, inst: _Instance, cp: int) -> None:
        """Before ``inst``'s replay of ``cp`` applies more: a cold start restores its own
        configuration's newest snapshot; a replay below the log start restores one that
        reaches where it is, else finds a gap (module docstring)."""
        sim = self.sim
        cold = self.cold.get(inst.me, set())
        if cold and inst.me not in self.announced:
            self._announce(inst)  # before its replay reads anything
        need = inst.applied[cp] + 1
        start = self.start[cp]
        if cp not in cold and need >= start:
            return
        cold.discard(cp)
        if sim.snapshot_rules:  # rule 1: only a snapshot of its own rules
            restored = coordlog.load_snapshot(
                None, cp, self.g_keys, earliest=start, snapshots=self.records(cp)
            )
        else:
            restored = load_any_rules(cp, self.g_keys, start, self.records(cp))
        if sim.upgrade is not None:
            sim.upgrade.cold_start(cp, start, restored)
        self.restored.pop((inst.me, cp), None)
        if restored is not None and restored.covered + 1 >= need:
            world = WorldState.from_bytes(
                restored.world.to_bytes(), admin_keys=self.g_keys, rules=sim.rules
            )
            inst.worlds[cp] = world
            inst.applied[cp] = restored.covered
            inst.last_seen[cp] = sim.log[cp][restored.covered] if restored.covered >= 0 else None
            rules = parse_snapshot_record(*self.topic[cp][restored.offset][1:]).rules
            said = "record version 1" if rules is None else f"rules {rules}"
            self.restored[(inst.me, cp)] = f"a snapshot ({said}) covering {restored.covered}"
            self._as_the_log(inst, cp, world, restored.covered)
            sim.note(
                f"{inst.me} restores cp{cp} from a snapshot ({said}) covering {restored.covered}"
            )
            return
        if need >= start:
            return
        self.gaps += 1
        inst.applied[cp] = start - 1
        inst.last_seen[cp] = sim.log[cp][start - 1]
        if not sim.refuse_gaps:
            sim.note(
                f"{inst.me} replays cp{cp} from {start}: records {need}..{start - 1} "
                "are gone (no refusal)"
            )
            return
        sim.note(f"{inst.me} HALTS cp{cp}: records {need}..{start - 1} are gone, no snapshot")
        inst.gapped.add(cp)
        self.regained[(inst.me, cp)] = Regained(start)
        # a second gap: what an earlier reset determined again is lost too (the core drops
        # it at the halt), so every partition must be named again, as the Consumer's edge
        # does (``Consumer._halted``)
        inst.resumed[cp] = set()
        sim.step(inst, Halted(cp, need, start, "gap"))
        if not self.reset_pending and self.last_reset[cp] < start:
            self.reset_pending = True
            sim.at(sim.now + self.rng.randint(self.hb, 3 * self.hb), self.operator_reset)

    def _as_the_log(self, inst: _Instance, cp: int, world: WorldState, covered: int) -> None:
        """A restored world is the world a full replay of the log through ``covered``
        builds (what restoring only snapshots of one's own rules and key configuration
        guarantees: the proof sketch's point 4); else the two replayers disagree from here
        on (reported once per instance and partition, and the run goes on)."""
        full = self._full.get((cp, covered))
        if full is None:
            full = self._full[(cp, covered)] = self.sim.world()
            full.apply_many((off, *self.sim.log[cp][off]) for off in range(covered + 1))
        if world.to_bytes() == full.to_bytes():
            return
        mine = {(p.group_id, p.topic, p.partition): p for p in world.partitions()}
        theirs = {(p.group_id, p.topic, p.partition): p for p in full.partitions()}
        differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        self.disagreed.add((inst.me, cp))
        self.sim.checks.fail_and_go_on(
            self.sim.now,
            f"{inst.me} restored cp{cp} from {self.restored[(inst.me, cp)]}, which is not "
            f"the world of the log's replay through {covered} (partitions that differ: "
            f"{['/'.join(map(str, k)) for k in differ][:4]}, e.g. "
            f"{_differ(mine, theirs, differ[0]) if differ else 'elsewhere'})",
        )

    def agree(self, inst: _Instance, cp: int, offset: int, verdict: object) -> None:
        """A replay that started from a snapshot judges the record at ``offset`` as the
        full replay of the log does (what restoring only snapshots of one's own rules and
        key configuration guarantees); reported once per instance and partition, and the
        run goes on to show what the disagreement causes."""
        sim = self.sim
        want = sim.oracle[cp].verdict(offset)
        if want is None or verdict == want or (inst.me, cp) in self.disagreed:
            return
        self.disagreed.add((inst.me, cp))
        _, key, value = sim.log[cp][offset]
        msg: Any = decode(key, value)
        what = f"{type(msg).__name__} {msg.client_id}:{msg.instance_id}"
        if hasattr(msg, "partition"):
            what += f" {msg.topic}/{msg.partition}"
        sim.checks.fail_and_go_on(
            sim.now,
            f"{inst.me}'s replay of cp{cp} disagrees with the log's at offset {offset} "
            f"({what}): {_said(verdict)}, the log's {_said(want)}; it started from "
            f"{self.restored[(inst.me, cp)]}",
        )

    def applied(
        self, inst: _Instance, cp: int, offsets: list[int], keys: list[bytes | None], verdicts: list
    ) -> None:
        """A halted replay's chunk: what the records after the gap determine again."""
        regained = self.regained.get((inst.me, cp))
        if regained is None:
            return
        world = inst.worlds[cp]
        regained.note(world, offsets, keys, verdicts)
        trusted = regained.trusted(self.sim.group, world.now)
        new = tuple(sorted(trusted - inst.resumed.get(cp, set())))
        if new:
            inst.resumed.setdefault(cp, set()).update(new)
            self.sim.note(f"{inst.me} RESUMES {list(new)} of cp{cp}")
            self.sim.step(inst, Resumed(cp, new))

    def operator_reset(self) -> None:
        """What docs/bounded-log.md tells an operator after a gap halt: reset the group
        (its positions to the current ones, as the log says them)."""
        sim = self.sim
        self.reset_pending = False
        client, instance = "admin", "gap-reset"
        hb = self.hb
        expiry = sim.now + sim.max_delay + self.rng.randint(2 * hb, 4 * hb)
        pausing = self._signed(
            ReleaseGroup(
                client_id=client, instance_id=instance, group_id=sim.group, msg_expire_time=expiry
            )
        )
        for cp in range(sim.ncoord):
            self.last_reset[cp] = sim.append(cp, *encode(pausing))
        plan = []
        for p in range(sim.partitions):
            world = sim.oracle[coordination_partition(sim.topic, p, sim.ncoord)]
            plan.append((p, world.resume_offset(sim.group, sim.topic, p) or 0))
        sim.note(f"OPERATOR RESET after a gap, pause until {expiry}: {plan}")
        for p, new in plan:
            msg = self._signed(
                Heartbeat(
                    client_id=client,
                    instance_id=instance,
                    group_id=sim.group,
                    topic=sim.topic,
                    partition=p,
                    last_offset=new - 1,
                    heartbeat_interval_ms=hb,
                )
            )
            sim.append(coordination_partition(sim.topic, p, sim.ncoord), *encode(msg))

    def _signed(self, msg: object) -> object:
        key = self.g_keys.get(self.sim.group)
        return msg if key is None else sign(msg, key)  # type: ignore[arg-type]

    def summary(self) -> str:
        return f"truncations {self.truncations}, gaps {self.gaps}"


def _said(v: Any) -> str:
    if v is None:
        return "?"
    return f"accepted {v.effect.value}" if v.accepted else f"rejected {v.reason.value}"


def _differ(mine: dict, theirs: dict, key: object) -> str:
    """What differs in one partition's state: its fields that are not equal."""
    a, b = mine.get(key), theirs.get(key)
    if a is None or b is None:
        return f"{'missing' if a is None else a} vs the log's {'missing' if b is None else b}"
    fields = [f.name for f in attrs.fields(type(a)) if getattr(a, f.name) != getattr(b, f.name)]
    return ", ".join(f"{f} {getattr(a, f)} vs the log's {getattr(b, f)}" for f in fields)
