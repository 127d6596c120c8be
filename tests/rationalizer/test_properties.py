"""Property tests: oracle agreement, replay equivalence, robustness on arbitrary bytes.

Every claim and heartbeat draws its own heartbeat interval, so holders with different
leases share a world; group "h" has an admin key, "g" has none, and admin records come
untagged, tagged with the key or tagged with another key. Version 3 task records
(HeartbeatingTask, ReleasingTask) go to the same keys as the plain partition records, so
vectors are set and cleared on the same partitions; their offsets straddle varint lengths
and some are mutated byte by byte, so ``apply_many``'s task lane (``rationalizer/
vectors.py``) meets vectors that keep, nearly keep and break a layout it learned.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rationalizer import (
    AnnouncingMember,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    HeartbeatingTask,
    LeavingGroup,
    MemberHeartbeat,
    NamingTenure,
    ReleaseGroup,
    ReleasingPartition,
    ReleasingTask,
    WorldState,
    decode,
    encode,
    sign,
)
from rationalizer._codec import DecodeError, seal
from rationalizer._messages import FUTURE_VERSIONS, MAX_OFFSET
from rationalizer._varint import uvarint

from .helpers import KEY, OTHER_KEY
from .model import Future, Model

HB = 100  # a typical lease; the drawn ones range around it
KEYS = {"h": KEY}
GROUPS = ("g", "h")
TOPIC = "t"
PARTS = (0, 1, 2)
WHO = (("a", "1"), ("a", "2"), ("b", "1"), ("c", "1"), ("adm", "x"))

who = st.sampled_from(WHO)
groups = st.sampled_from(GROUPS)
parts = st.sampled_from(PARTS)
small_offsets = st.integers(-1, 50)
dts = st.integers(-30, 3 * HB)
hbs = st.one_of(st.sampled_from([HB // 2, HB, 2 * HB]), st.integers(1, 4 * HB))
auths = st.sampled_from([None, KEY, KEY, KEY, OTHER_KEY])
SOURCES = ("a", "b", "c")


def _vector(n: int) -> tuple[tuple[str, int], ...]:
    """A task's position vector made from one drawn offset (-1..50): one to three sources."""
    return tuple((s, max(-1, n - 7 * i)) for i, s in enumerate(SOURCES[: 1 + n % 3]))


#: Offsets near the varint lengths' edges (1, 2, 3, 4, 9 and 10 bytes for offset + 1), so
#: that a task's next vector keeps its layout, changes a low byte, an upper byte or a length.
EDGES = (126, 127, 128, 16_382, 16_383, 16_384, 2**21 - 2, 2**21 - 1, 2**28, 2**56, 2**60)
big_offsets = st.one_of(
    st.integers(-1, 3), st.sampled_from(EDGES).flatmap(lambda e: st.integers(e - 2, e + 2))
)
#: Vectors of two or three sources with big offsets (sums stay below 2^63), and one source
#: as far as it can go: offset 2^63 - 1 takes ten varint bytes.
big_vectors = st.one_of(
    st.tuples(big_offsets, big_offsets).map(lambda o: tuple(zip(("a", "b"), o, strict=True))),
    st.tuples(big_offsets, big_offsets, big_offsets).map(
        lambda o: tuple(zip(SOURCES, o, strict=True))
    ),
    st.sampled_from([(("a", MAX_OFFSET),), (("a", MAX_OFFSET - 1),), (("b", 0),)]),
)


def _msg(
    kind: str,
    w: tuple[str, str],
    g: str,
    p: int,
    n: int,
    hb: int = HB,
    key: bytes | None = None,
    tenure: int | None = None,
    tenures: dict[int, int | None] | None = None,
):
    if kind == "admin_beat":  # the admin setting a position (or trying to)
        kind, w = "beat", WHO[-1]
    elif kind == "admin_group":
        kind, w = "group", WHO[-1]
    ids = {"client_id": w[0], "instance_id": w[1], "group_id": g}
    if kind in ("claim", "claim5", "claim6"):
        version = {"claim": 1, "claim5": 5, "claim6": 6}[kind]
        return ClaimingPartition(
            **ids, topic=TOPIC, partition=p, heartbeat_interval_ms=hb, version=version
        )
    if kind == "beats":  # version 7: p and maybe the next partitions, each naming a tenure
        ps = sorted({PARTS[(p + i) % len(PARTS)] for i in range(1 + (n + 1) % 3)})
        entries = []
        for q in ps:
            named = (tenures or {}).get(q)
            entries.append((TOPIC, q, max(0, n - q) if named is None else named, max(-1, n - q)))
        return MemberHeartbeat(**ids, heartbeat_interval_ms=hb, entries=tuple(entries))
    if kind == "name":  # version 9: the holder names its tenure (or anyone tries)
        return NamingTenure(**ids, topic=TOPIC, partition=p)
    if kind == "beat":
        msg = Heartbeat(**ids, topic=TOPIC, partition=p, last_offset=n, heartbeat_interval_ms=hb)
        return msg if key is None else sign(msg, key)
    if kind == "release":
        return ReleasingPartition(**ids, topic=TOPIC, partition=p, last_offset=n)
    if kind == "release6":  # version 6: naming a tenure (the right one or another)
        tenure = max(0, n) if tenure is None else tenure
        return ReleasingPartition(**ids, topic=TOPIC, partition=p, last_offset=n, tenure=tenure)
    if kind == "msgs":
        return ClaimingMessages(**ids, topic=TOPIC, partition=p, proposed_last_offset=n)
    if kind == "msgs4":  # version 4: a reservation naming its first offset
        first = max(0, n - hb % 7)
        return ClaimingMessages(
            **ids, topic=TOPIC, partition=p, proposed_last_offset=max(n, first), first_offset=first
        )
    if kind == "task_beat":
        return HeartbeatingTask(
            **ids, topic=TOPIC, partition=p, heartbeat_interval_ms=hb, positions=_vector(n)
        )
    if kind == "task_beat8":  # version 8: naming a tenure (the right one or another)
        tenure = max(0, n) if tenure is None else tenure
        return HeartbeatingTask(
            **ids,
            topic=TOPIC,
            partition=p,
            heartbeat_interval_ms=hb,
            positions=_vector(n),
            tenure=tenure,
        )
    if kind == "task_release":
        return ReleasingTask(**ids, topic=TOPIC, partition=p, positions=_vector(n))
    if kind == "task_release6":  # version 6: naming a tenure
        tenure = max(0, n) if tenure is None else tenure
        return ReleasingTask(**ids, topic=TOPIC, partition=p, positions=_vector(n), tenure=tenure)
    msg = ReleaseGroup(**ids, msg_expire_time=max(0, n))
    return msg if key is None else sign(msg, key)


kinds = st.sampled_from(
    ["claim", "claim5", "claim5", "claim6", "claim6"]
    + ["beat"] * 5
    + ["release", "release6", "release6", "msgs", "msgs", "msgs4", "msgs4", "group"]
    + ["admin_group"]
    + ["admin_beat", "admin_beat"]
    + ["task_beat", "task_beat", "task_release", "task_release6", "task_beat8", "task_beat8"]
    + ["beats"] * 4
    + ["name"] * 3
)
#: more task records, for the logs of the fast-lane equivalence
task_kinds = st.sampled_from(
    ["task_beat"] * 4 + ["task_beat8", "task_release", "claim", "claim5", "claim6", "beat", "name"]
)
garbage = st.tuples(
    st.one_of(st.none(), st.binary(max_size=20)),
    # version-shaped junk too: byte 0 of a version to come, but no envelope (no valid check)
    st.one_of(
        st.none(),
        st.binary(max_size=40),
        st.tuples(st.sampled_from(FUTURE_VERSIONS), st.binary(max_size=30)).map(
            lambda vb: bytes([vb[0]]) + vb[1]
        ),
    ),
)


def _member(draw, w: tuple[str, str], g: str):
    """A membership record (version 2 or 4): it never changes a partition, but shares the
    world (and rule 1, fencing) with them."""
    ids = {"client_id": w[0], "instance_id": w[1], "group_id": g}
    if draw(st.integers(0, 3)) == 0:
        return LeavingGroup(**ids)
    return AnnouncingMember(
        **ids,
        topics=((TOPIC, 3),),
        heartbeat_interval_ms=draw(hbs),
        version=draw(st.sampled_from([2, 4])),
    )


def _mutated(draw, msg, key: bytes, value: bytes) -> tuple[bytes, bytes, object]:
    """A task record with one byte replaced (not the version byte: it stays version 3), and
    what it decodes to now (None: invalid). Mostly a byte of the vector, with a value that
    sets or clears a varint's continuation bit, or ends one with a zero."""
    start = 6 if isinstance(msg, HeartbeatingTask) else 2
    size = 1 + sum(1 + len(t) + len(uvarint(o + 1)) for t, o in msg.positions)
    if draw(st.integers(0, 3)):
        i = draw(st.integers(start, start + size - 1))
        b = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0x81, 0xFF, value[i] ^ 0x80]))
    else:
        i = draw(st.integers(1, len(value) - 1))
        b = draw(st.integers(0, 255))
    value = value[:i] + bytes((b,)) + value[i + 1 :]
    try:
        return key, value, decode(key, value)
    except DecodeError:
        return key, value, None


@st.composite
def logs(draw, max_size=80, tasks=False, members=False):
    """A coordination log: list of (offset, ts, key, value, message-or-None). ``tasks``:
    mostly task records, with big offsets, some of them mutated; ``members``: membership
    records too (the oracle does not judge those)."""
    out = []
    t = 0
    offset = 0
    admin_g = None
    vectors: dict[tuple[str, int], tuple[tuple[str, int], ...]] = {}  # the last, per key
    tenures: dict[tuple[str, int], int] = {}  # offset of the key's last claim6 or heartbeat
    for _ in range(draw(st.integers(0, max_size))):
        t += draw(dts)
        offset += draw(st.sampled_from([1, 1, 1, 2, 7]))
        if draw(st.integers(0, 15)) == 0:
            key, value = draw(garbage)
            out.append((offset, t, key, value, None))
            continue
        if members and draw(st.integers(0, 9)) == 0:
            msg = _member(draw, draw(who), draw(groups))
            out.append((offset, t, *encode(msg), msg))
            continue
        kind = draw(task_kinds if tasks and draw(st.booleans()) else kinds)
        n = draw(small_offsets)
        g = draw(groups)
        if kind in ("group", "admin_group"):
            n = t + draw(st.integers(-50, 4 * HB))
        if kind == "admin_group":
            admin_g = g
        elif kind == "admin_beat" and admin_g and draw(st.integers(0, 4)):
            g = admin_g  # mostly into the group the admin paused
        p = draw(parts)
        # a version 6 release mostly names the tenure the key's last claim or heartbeat
        # would have begun (it may not have been accepted), else any offset
        tenure = tenures.get((g, p)) if draw(st.integers(0, 2)) else None
        named = {q: tenures.get((g, q)) for q in PARTS} if draw(st.integers(0, 3)) else None
        msg = _msg(kind, draw(who), g, p, n, draw(hbs), draw(auths), tenure, named)
        if kind in ("claim6", "beat", "task_beat8", "name"):
            tenures[(g, p)] = offset
        if tasks and kind.startswith("task"):
            last = vectors.get((g, p))
            if last is not None and draw(st.integers(0, 3)):
                # the key's last vector, moved on a little: its layout, mostly
                vector = tuple((s, o + draw(st.integers(0, 3))) for s, o in last)
                if sum(o + 1 for _, o in vector) - 1 <= MAX_OFFSET:
                    msg = attrs.evolve(msg, positions=vector)
            elif draw(st.booleans()):
                msg = attrs.evolve(msg, positions=draw(big_vectors))
            vectors[(g, p)] = msg.positions
        key, value = encode(msg)
        if tasks and kind.startswith("task") and draw(st.integers(0, 4)) == 0:
            key, value, msg = _mutated(draw, msg, key, value)
        out.append((offset, t, key, value, msg))
    return out


def _replay_all(records, window=8):
    w = WorldState(verdict_window=window, admin_keys=KEYS)
    return w, [w.apply(o, t, k, v) for o, t, k, v, _ in records]


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.data())
def test_replay_equivalence_one_by_one_chunked_and_snapshot(records, data):
    w1, v1 = _replay_all(records)
    # chunked
    w2 = WorldState(verdict_window=8, admin_keys=KEYS)
    v2: list = []
    i = 0
    while i < len(records):
        n = data.draw(st.integers(1, 10))
        v2 += w2.apply_many([r[:4] for r in records[i : i + n]])
        i += n
    assert v2 == v1
    assert w2.to_bytes() == w1.to_bytes()
    # snapshot at an arbitrary point, then the tail
    cut = data.draw(st.integers(0, len(records)))
    head, _ = _replay_all(records[:cut])
    restored = WorldState.from_bytes(head.to_bytes(), admin_keys=KEYS)
    assert restored.to_bytes() == head.to_bytes()
    v3 = [restored.apply(*r[:4]) for r in records[cut:]]
    assert v3 == v1[cut:]
    assert restored.to_bytes() == w1.to_bytes()
    for o, *_ in records:
        assert restored.verdict(o) == w1.verdict(o)
    # re-applying everything is a no-op returning recorded verdicts
    before = w1.to_bytes()
    again = w1.apply_many([r[:4] for r in records])
    assert w1.to_bytes() == before
    assert all(a is None or a == b for a, b in zip(again, v1, strict=True))


def _cold(records, window=8):
    """The strict decoder's verdicts: one record at a time, the world's identity caches
    (and so the learned vector layouts) emptied after each, so no record takes a fast lane
    that an earlier one opened: every task record goes through ``decode_task_fields``."""
    w = WorldState(verdict_window=window, admin_keys=KEYS)
    out = []
    for o, t, k, v, _ in records:
        out.append(w.apply(o, t, k, v))
        for cache in (
            w._ids.by_bytes,
            w._ids.by_key,
            w._ids.senders,
            w._ids.topics,
            w._ids.layouts,
        ):
            cache.clear()
    return w, out


@pytest.mark.parametrize(
    "python_vectors",
    [False, pytest.param(True, marks=pytest.mark.long)],  # (the other engine: -m long)
    ids=["default", "python-vectors"],
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(tasks=True, members=True), st.data())
def test_fast_lanes_judge_every_record_as_the_strict_decoder(python_vectors, records, data):
    """Random logs of every record type (versions 1 to 4, task records that keep or break
    a learned layout, membership records, junk): ``apply_many`` in one call, in chunks and
    ``apply`` one at a time reach the verdicts and the snapshot bytes of a world that
    decodes every record strictly; with the task vectors read by the C reader where it is
    built (the default) and by the pure-Python layouts."""
    cold, want = _cold(records)
    whole = WorldState(verdict_window=8, admin_keys=KEYS, _python_vectors=python_vectors)
    assert whole.apply_many([r[:4] for r in records]) == want
    assert whole.to_bytes() == cold.to_bytes()
    one = WorldState(verdict_window=8, admin_keys=KEYS, _python_vectors=python_vectors)
    got = [one.apply(o, t, k, v) for o, t, k, v, _ in records]
    assert got == want
    assert one.to_bytes() == cold.to_bytes()
    chunked = WorldState(verdict_window=8, admin_keys=KEYS, _python_vectors=python_vectors)
    i = 0
    while i < len(records):
        n = data.draw(st.integers(1, 10))
        assert chunked.apply_many([r[:4] for r in records[i : i + n]]) == want[i : i + n]
        i += n
    assert chunked.to_bytes() == cold.to_bytes()
    for g in GROUPS:
        for p in PARTS:
            assert whole.resume_positions(g, TOPIC, p) == cold.resume_positions(g, TOPIC, p)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(logs())
def test_agrees_with_oracle_and_single_holder(records):
    w = WorldState(admin_keys=KEYS)
    m = Model(KEYS)
    for o, t, k, v, msg in records:
        got = w.apply(o, t, k, v)
        want = m.apply(t, msg, o)
        assert (got.accepted, got.reason, got.effect) == want, msg
        if isinstance(msg, MemberHeartbeat):
            assert [(e.accepted, e.reason, e.effect) for e in got.entries] == list(m.entries)
        for g in GROUPS:
            for p in PARTS:
                st_ = m.parts.get((g, TOPIC, p))
                assert w.holder(g, TOPIC, p) == (st_["holder"] if st_ else None)
                assert w.resume_offset(g, TOPIC, p) == m.resume_offset((g, TOPIC, p))
                assert w.resume_positions(g, TOPIC, p) == m.resume_positions((g, TOPIC, p))
                if st_:
                    state = w.partition_state(g, TOPIC, p)
                    assert state.heartbeat_interval_ms == st_["hb"]
                    assert state.has_position == st_["pos"]
                    assert (state.last_offset, state.claimed_through) == (
                        st_["last"],
                        st_["claimed"],
                    )


@settings(max_examples=300)
@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), garbage), max_size=20))
def test_apply_never_raises_on_arbitrary_bytes(items):
    w = WorldState(admin_keys=KEYS)
    for i, (t, (k, v)) in enumerate(items):
        verdict = w.apply(i, t, k, v)
        assert verdict is not None
    WorldState.from_bytes(w.to_bytes())


def _model_freshness(st_, at):
    if st_["holder"] is None:
        return None
    age = at - st_["beat"]
    if age < st_["hb"]:
        return "fresh"
    return "unknown" if age <= 2 * st_["hb"] else "stale"


class Replayers(RuleBasedStateMachine):
    """Random protocol traffic against WorldState and the oracle (whose holder is a single value: at most
    one per partition at every log time); the world is snapshotted and restored mid-way."""

    def __init__(self) -> None:
        super().__init__()
        self.w = WorldState(verdict_window=16, admin_keys=KEYS)
        self.m = Model(KEYS)
        self.t = 0
        self.offset = 0
        self.admin_g = None

    def _apply(self, key, value, msg):
        got = self.w.apply(self.offset, self.t, key, value)
        want = self.m.apply(self.t, msg, self.offset)
        assert (got.accepted, got.reason, got.effect) == want
        if isinstance(msg, MemberHeartbeat):
            assert [(e.accepted, e.reason, e.effect) for e in got.entries] == list(self.m.entries)
        assert self.w.verdict(self.offset) == got
        self.offset += 1
        return got

    @rule(dt=dts)
    def advance(self, dt):
        self.t += dt

    @rule(
        kind=kinds,
        w=who,
        g=groups,
        p=parts,
        n=small_offsets,
        extra=st.integers(-50, 4 * HB),
        hb=hbs,
        key=auths,
        exact=st.booleans(),
    )
    def send(self, kind, w, g, p, n, extra, hb, key, exact):
        if kind in ("group", "admin_group"):
            n = self.t + extra
        if kind == "admin_group":
            self.admin_g = g
        elif kind == "admin_beat" and self.admin_g and n % 4:
            g = self.admin_g  # mostly into the group the admin paused
        # a version 6 release names the partition's tenure (exact) or an offset near it
        tenure = self.m.parts.get((g, TOPIC, p), {}).get("tenure") if exact else None
        holder = self.m.parts.get((g, TOPIC, p), {}).get("holder")
        if kind == "name" and exact and holder is not None:
            w = holder  # the holder names its tenure (property j; named already: refused)
        named = {q: self.m.parts.get((g, TOPIC, q), {}).get("tenure") for q in PARTS}
        msg = _msg(kind, w, g, p, n, hb, key, tenure, named if exact else None)
        self._apply(*encode(msg), msg)

    # (late in a run, at most once: a halted group takes no further part)
    @precondition(lambda self: self.offset >= 30 and not self.m.halted)
    @rule(
        g=groups,
        version=st.sampled_from(FUTURE_VERSIONS),
        typ=st.integers(0, 255),
        body=st.binary(max_size=12),
    )
    def future(self, g, version, typ, body):
        """A well-formed record of a version to come: its group is halted from here on."""
        self._apply(b"any key", seal(version, typ, g, body), Future(g, version))
        assert self.w.halted_groups == self.m.halted

    @rule(kv=garbage)
    def junk(self, kv):
        assert self._apply(kv[0], kv[1], None).reason is not None

    @precondition(lambda self: self.offset > 0)
    @rule()
    def snapshot_restore(self):
        data = self.w.to_bytes()
        self.w = WorldState.from_bytes(data, admin_keys=KEYS)
        assert self.w.to_bytes() == data

    @invariant()
    def one_holder_matching_oracle(self):
        for g in GROUPS:
            for p in PARTS:
                st_ = self.m.parts.get((g, TOPIC, p))
                holder = self.w.holder(g, TOPIC, p)
                assert holder == (st_["holder"] if st_ else None)
                if self.w.paused_until(g) is not None:
                    assert holder is None
                ro = self.w.resume_offset(g, TOPIC, p)
                assert ro == self.m.resume_offset((g, TOPIC, p))
                rp = self.w.resume_positions(g, TOPIC, p)
                assert rp == self.m.resume_positions((g, TOPIC, p))
                if st_:
                    # freshness at any time is judged with the holder's own lease
                    state = self.w.partition_state(g, TOPIC, p)
                    assert state.heartbeat_interval_ms == st_["hb"]
                    assert state.has_position == st_["pos"]
                    assert (state.last_offset, state.claimed_through) == (
                        st_["last"],
                        st_["claimed"],
                    )
                    for dt in (0, 1, st_["hb"] or 0, 2 * (st_["hb"] or 0) + 1):
                        at = max(self.t, self.w.now) + dt
                        got = self.w.freshness(g, TOPIC, p, at)
                        assert got == _model_freshness(st_, at)
                        end = self.w.paused_until(g)
                        lease = self.m.lease_end((g, TOPIC, p))
                        assert self.w.claimable(g, TOPIC, p, at) == (
                            g not in self.m.halted
                            and (end is None or at >= end)
                            and got in (None, "stale")
                            and (lease is None or at > lease)  # a version 5 claim's view
                        )
                        want_until = (
                            lease + 1 if lease is not None and lease + 1 > self.w.now else None
                        )
                        assert state.fenced_until == want_until
                    assert state.tenure == (st_.get("tenure") if st_["holder"] else None)
                    ended = st_.get("ended")
                    assert (
                        state.last_holder,
                        state.last_holder_end_ms,
                        state.last_holder_voided,
                    ) == (ended or (None, None, False))


Replayers.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestReplayers = Replayers.TestCase
