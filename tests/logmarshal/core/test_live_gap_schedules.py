"""A live gap (PROTOCOL.md, "A coordination log that loses records"), step by step: an
instance whose replay finds records deleted unseen in a coordination partition it wrote to
stops, as a fenced one does (what they held may have been taken over by a newer instance of
its client_id, and the fence with it); a gap where it never wrote does not stop it.

The schedule (the simulator's seed 659 with --seeks): c1/i1 (AMO) holds p0 and freezes; c1's
newer instance i2 takes p0 over (the log fences i1) and hands out; a publisher's truncation
then deletes everything up to after that takeover (no snapshot of i1's configuration covers
it); i1 wakes and its replay finds the gap.

The instance is the Marshaler's, not a core's: every Consumer of one Marshaler writes as
its (client_id, instance_id) and shares its replay. A new Consumer built on it after the gap
(user code restarting the fenced one in place, or a second Consumer of other topics) has a
new core that wrote nothing, so the Consumer tells it the gap is live (``Halted.live``, from
:meth:`Marshaler.lost`); without that it took the gap for a cold start's, regained p0 after
the operator's reset and handed out what i2 handed out (found by an attack on the rule).
"""

from __future__ import annotations

import attrs
import pytest

from logmarshal.core import (
    Halted,
    MemberCore,
    Regained,
    Replayed,
    Resumed,
    Tick,
    Write,
    Written,
)
from logmarshal.core.state import cp_of, membership_partition
from rationalizer import Heartbeat, ReleaseGroup, WorldState, encode

from .stepper import GROUP, HB, TOPIC, Group, Member, describe
from .test_core import options

ADMIN = {"client_id": "adm", "instance_id": "1", "group_id": GROUP}


def _append(g: Group, msg: object) -> None:
    """A record written by someone outside the group's members (the admin CLI)."""
    key, value = encode(msg)  # type: ignore[arg-type]
    offset = len(g.log)
    g.log.append((g.now, key, value))
    v = g.oracle.apply(offset, g.now, key, value)
    g.verdicts.append(f"{g.now} ADMIN {type(msg).__name__}: {v}")


class Gapped:
    """The replay of a member whose records below ``earliest`` were truncated before it
    applied them: what the tailer does (``_recover`` -> ``_gap``: Halted before anything
    after the gap is applied; then every chunk noted by ``Regained``), and what the
    Consumer does with ``Regained`` (``Halts.regained``: Resumed once the trusted set grows)."""

    def __init__(self, g: Group, m: Member, earliest: int) -> None:
        self.g, self.m, self.earliest = g, m, earliest
        self.before = m.world.applied_through + 1
        self.regained = Regained(earliest)
        self.told: frozenset = frozenset()

    def halt(self, m: Member | None = None, live: bool = False) -> None:
        m = m or self.m
        self.g.step(m, Halted(0, self.before, self.earliest, "gap", live=live))

    def replay(self, members: list[Member]) -> None:
        g, world = self.g, self.m.world
        start = max(world.applied_through + 1, self.earliest)
        offsets, keys, verdicts = [], [], []
        for off in range(start, len(g.log)):
            ts, key, value = g.log[off]
            verdicts.append(world.apply(off, ts, key, value))
            offsets.append(off)
            keys.append(key)
        if offsets:
            self.regained.note(world, offsets, keys, verdicts)
        for m in members:
            g.step(m, Replayed(0, len(g.log) - 1, at_end=True))
        trusted = self.regained.trusted(GROUP, world.now)
        if trusted - self.told:
            self.told = trusted
            for m in members:
                g.step(m, Resumed(0, tuple(sorted(trusted))))

    def run(self, members: list[Member], others: list[Member], until: int, every: int = 10):
        """As ``Group.run``: ``members`` share this gapped replay; ``others`` replay all."""
        g = self.g
        while g.now < until:
            g.now = min(until, g.now + every)
            for m in members + others:
                if m.core.closed:
                    continue
                g.step(m, Tick())
                g.land(m)
                self.replay(members) if m in members else g.replay(m)
                g.serve(m)
                g.poll(m)
                g.land(m)
                self.replay(members) if m in members else g.replay(m)


def _fenced_in_the_gap() -> tuple[Group, Member, Member, Gapped]:
    g = Group(batch=30, max_reserved=30)
    i1 = g.start("c1", "i1", budget=30)
    g.run([i1], until=3 * HB)
    assert g.handed_by(i1) == list(range(30)), describe(g)
    # i1 freezes (SIGSTOP, a stalled VM); c1 is restarted elsewhere as i2, which takes p0
    i2 = g.start("c1", "i2", budget=30)
    g.run([i2], until=8 * HB)
    assert g.oracle.is_fenced("c1", "i1"), describe(g)
    assert g.oracle.holder(GROUP, TOPIC, 0) == ("c1", "i2"), describe(g)
    assert g.handed_by(i2), describe(g)
    # a publisher truncates everything up to here: i1's membership lapsed long ago, no
    # snapshot of its configuration covers what it never applied
    gap = Gapped(g, i1, earliest=len(g.log))
    g.run([i2], until=9 * HB)
    # i1 wakes: its first step finds the stall; its replay finds the gap
    g.step(i1, Tick())
    gap.halt()
    gap.replay([i1])
    return g, i1, i2, gap


def test_a_live_gap_fences_the_woken_instance() -> None:
    """What c50880d closes: the woken i1 stops."""
    _, i1, _, _ = _fenced_in_the_gap()
    assert i1.core.fenced


def _admin_reset(g: Group, position: int, pause: int = 3 * HB) -> int:
    """``logmarshal group reset``: a ReleaseGroup whose pause is at least 2·HB, and the
    position of p0. Returns the pause's end (log time)."""
    end = g.now + pause
    _append(g, ReleaseGroup(**ADMIN, msg_expire_time=end))
    _append(
        g,
        Heartbeat(
            **ADMIN, topic=TOPIC, partition=0, last_offset=position, heartbeat_interval_ms=HB
        ),
    )
    return end


@pytest.mark.parametrize("live", [True, False])
def test_a_new_core_of_the_fenced_instance_is_told_the_gap_is_live(live: bool) -> None:
    """User code sees ``consumer.fenced``, closes that Consumer and builds a new one on the
    same Marshaler: a new core of the same instance, fed the gap at construction. Told it
    is live (``live``, as the Consumer tells it) it stops; taken for a cold start's
    (``live=False``, the hole) it regains p0 after the operator's reset while the log
    refuses its claim as fenced, and hands out what i2, the holder, hands out again."""
    g, i1, i2, gap = _fenced_in_the_gap()
    assert i1.core.fenced
    again = MemberCore(i1.core.options, [i1.world])
    i1b = Member(again, i1.world, budget=30)
    g.members.append(i1b)
    # Consumer.__init__: the halts the Marshaler found before it listened, then the
    # start-up replay's answer
    gap.halt(i1b, live=live)
    gap.replay([i1b])
    assert i1b.me == ("c1", "i1") and i1b.core.fenced is live
    # the operator's gap reset (PROTOCOL.md: the recovery the halt's error line names)
    position = g.oracle.resume_offset(GROUP, TOPIC, 0) - 1
    end = _admin_reset(g, position)
    gap.run([i1b], [i2], until=end - 10)
    # i2's claim pass comes a little later than i1b's (claim passes are HB/2 apart with
    # jitter; here i2 is slow for one HB, a GC pause: it holds nothing meanwhile, the reset
    # voided its claim)
    gap.run([i1b], [], until=end + HB)
    i2.budget = 30
    gap.run([i1b], [i2], until=end + 6 * HB)
    if live:
        assert g.handed_by(i1b) == list(range(30)), describe(g)  # i1's, nothing more
        assert g.oracle.holder(GROUP, TOPIC, 0) == ("c1", "i2"), describe(g)
        assert g.repeats() == {}, describe(g)
    else:
        assert g.repeats() != {}, describe(g)


def _restarted(g: Group, m: Member, instance_id: str, budget: int = 0) -> Member:
    """``m``'s process started again: a new instance of its client, a replay of its own
    that has applied nothing yet."""
    world = WorldState()
    core = MemberCore(attrs.evolve(m.core.options, instance_id=instance_id), [world])
    again = Member(core, world, budget=budget)
    g.members.append(again)
    return again


def test_a_whole_group_paused_past_a_truncation_comes_back_restarted() -> None:
    """Every member of the group is paused at once (one VM, a suspended node) while a
    publisher of another configuration truncates past what they had not applied. Nothing
    fenced anyone, but both wrote there, so both wake to a live gap and stop (the rule
    cannot tell); the operator's reset alone brings nothing back (found by the attack: the
    group stayed down). The recovery is a restart of every member: new instances, whose
    replays find the gap cold, regain after the reset and hand out from the position it
    set, nothing twice. (``Consumer.run`` returns once its consumer is fenced, so whoever
    runs it can restart it.)"""
    g = Group(batch=30, max_reserved=30)
    a = g.start("c1", "i1", budget=30)
    b = g.start("c2", "i2")
    g.run([a, b], until=3 * HB)
    assert g.handed_by(a) == list(range(30)), describe(g)
    # both freeze; another group's traffic grows the log and its publisher truncates it
    for _ in range(8):
        g.now += HB
        _append(g, ReleaseGroup(**{**ADMIN, "group_id": "other"}, msg_expire_time=g.now))
    earliest = len(g.log) - 2
    gaps = {m.me: Gapped(g, m, earliest=earliest) for m in (a, b)}
    for m in (a, b):
        g.step(m, Tick())
        gaps[m.me].halt()
        gaps[m.me].replay([m])
    assert not g.oracle.is_fenced("c1", "i1") and not g.oracle.is_fenced("c2", "i2")
    assert a.core.fenced and b.core.fenced  # the rule's suspicion: both wrote there
    position = g.oracle.resume_offset(GROUP, TOPIC, 0) - 1
    end = _admin_reset(g, position)
    # every member restarted: new instances, whose replays start where the log starts now
    a2, b2 = _restarted(g, a, "i3", budget=30), _restarted(g, b, "i4")
    cold = {m.me: Gapped(g, m, earliest=earliest) for m in (a2, b2)}
    for m in (a2, b2):
        cold[m.me].halt()  # found cold: not fenced
        cold[m.me].replay([m])
    assert not a2.core.fenced and not b2.core.fenced
    while g.now < end + 10 * HB:
        g.now += 10
        for m in (a2, b2):
            g.step(m, Tick())
            g.land(m)
            cold[m.me].replay([m])
            g.serve(m)
            g.poll(m)
            g.land(m)
            cold[m.me].replay([m])
    assert g.oracle.holder(GROUP, TOPIC, 0) is not None, describe(g)
    assert g.handed_by(a2) or g.handed_by(b2), describe(g)
    assert g.repeats() == {}, describe(g)


def test_held_the_woken_instance_hands_out_nothing_before_or_after_the_gap_halt() -> None:
    """Held: i1 wakes with records fetched and reserved (AMO, a window ahead of its polls);
    user code polls before its replay reported anything (the stall rule: nothing), then the
    gap halts it (fenced), and polls again: nothing, and nothing it writes is accepted."""
    g = Group(batch=30, max_reserved=30)
    i1 = g.start("c1", "i1", budget=10)
    g.run([i1], until=3 * HB)
    assert g.handed_by(i1) == list(range(10)) and i1.core.buffered(TOPIC, 0) > 0, describe(g)
    i2 = g.start("c1", "i2", budget=30)
    g.run([i2], until=8 * HB)
    gap = Gapped(g, i1, earliest=len(g.log))
    i1.budget = 30
    g.poll(i1)  # the first step after the freeze: the stall is found, nothing handed out
    g.step(i1, Tick())
    g.land(i1)
    assert g.handed_by(i1) == list(range(10)), describe(g)
    gap.halt()
    gap.replay([i1])
    assert i1.core.fenced and i1.core.held() == []
    gap.run([i1], [i2], until=12 * HB)
    assert g.handed_by(i1) == list(range(10)) and g.repeats() == {}, describe(g)


CPS = 4


def _land(core, worlds, logs, now, actions):
    while True:
        more = []
        for a in actions:
            if isinstance(a, Write):
                off = len(logs[a.cp])
                logs[a.cp].append((now, a.key, a.value))
                worlds[a.cp].apply(off, now, a.key, a.value)
                more += core.step(now, Replayed(a.cp, off, at_end=True))
                more += core.step(now, Written(a.token, off))
        if not more:
            return
        actions = more


def test_a_gap_where_this_instance_never_wrote_does_not_stop_it() -> None:
    """A fence in a coordination partition is a takeover of a claim held there: a gap
    where this instance wrote nothing (a replay that alone fell behind, its leader away)
    cannot hide one, and must not stop a member holding partitions elsewhere (found by the
    attack: the first rule stopped it for a gap in any partition)."""
    opts = options(coordination_partitions=CPS)
    worlds = [WorldState() for _ in range(CPS)]
    logs: list[list] = [[] for _ in range(CPS)]
    core = MemberCore(opts, worlds)
    out = []
    for cp in range(CPS):
        out += core.step(0, Replayed(cp, -1, at_end=True))
    _land(core, worlds, logs, 0, out)
    for now in range(1, 200, 10):
        _land(core, worlds, logs, now, core.step(now, Tick()))
    assert core.held() == [("t", 0)]
    used = {membership_partition("g", CPS), cp_of(core._st, "t", 0)}
    quiet = next(cp for cp in range(CPS) if cp not in used)
    assert logs[quiet] == []  # this instance wrote nothing there
    _land(core, worlds, logs, 200, core.step(200, Halted(quiet, 0, 7, "gap")))
    assert not core.fenced, "stopped for a gap where no record could have fenced it"
    # the same gap where it wrote (its claim's partition) stops it
    home = cp_of(core._st, "t", 0)
    _land(core, worlds, logs, 210, core.step(210, Halted(home, 0, 7, "gap")))
    assert core.fenced
