"""bench/audit.py's synthesized log is what it says it is: the rationalizer accepts nearly
every heartbeat entry it writes, its restarts are restart takeovers and its fenced
instances' last words are refused, with MemberHeartbeats (cap 7) and without (cap 6)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bench import audit
from logmarshal import EmbeddedCluster
from logmarshal.marshaler import COORDINATION_TOPIC
from rationalizer import WorldState


def _judged(tmp_path: Path, members: bool) -> tuple[dict, Counter]:
    """Synthesize a small log and replay it; count (kind, accepted, effect or reason) per
    entry of a MemberHeartbeat and per record otherwise."""
    kinds: dict[tuple[int, int], str] = {}
    put = audit._Log.put

    def remember(self: audit._Log, cp: int, key: bytes, value: bytes, kind: str) -> int:
        offset = put(self, cp, key, value, kind)
        kinds[(cp, offset)] = kind
        return offset

    clock = [0]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(audit._Log, "put", remember)
        with EmbeddedCluster(tmp_path, clock=lambda: clock[0], maintenance_interval=0) as c:
            made = audit.synthesize(c, clock, 20_000, 3, members=members)
            judged: Counter = Counter()
            for cp in range(audit.N_COORD):
                world, offset = WorldState(), 0
                while got := c.fetch(COORDINATION_TOPIC, cp, offset):
                    for r in got:
                        v = world.apply(r.offset, r.timestamp, r.key, r.value)
                        kind = kinds[(cp, r.offset)]
                        for e in v.entries or (v,):
                            outcome = e.effect if e.accepted else e.reason
                            judged[(kind, e.accepted, outcome.value if outcome else None)] += 1
                    offset = got[-1].offset + 1
    return made, judged


def _share(judged: Counter, kind: str, accepted: bool = True) -> float:
    total = sum(n for (k, _a, _o), n in judged.items() if k == kind)
    return sum(n for (k, a, _o), n in judged.items() if k == kind and a == accepted) / total


def test_member_heartbeats_name_their_tenures(tmp_path: Path) -> None:
    made, judged = _judged(tmp_path, members=True)
    mix = made["mix"]
    # one record per member and coordination partition per pass, carrying several entries
    assert mix["entries"] > 1.5 * mix["member_heartbeat"], mix
    assert _share(judged, "member_heartbeat") >= 0.9, judged
    # the other partitions of a restarted member change hands by its first entries
    assert judged[("member_heartbeat", True, "restart_takeover")] > 0, judged
    assert judged[("restart", True, "restart_takeover")] >= 0.9 * mix["restart"], judged
    assert judged[("zombie", False, "fenced")] >= 0.9 * mix["zombie"] > 0, judged
    assert _share(judged, "claim") >= 0.9 and _share(judged, "release") >= 0.9, judged


def test_partition_heartbeats_as_before_version_7(tmp_path: Path) -> None:
    made, judged = _judged(tmp_path, members=False)
    assert "member_heartbeat" not in made["mix"] and "entries" not in made["mix"]
    assert _share(judged, "heartbeat") >= 0.95, judged
    assert judged[("restart", True, "restart_takeover")] >= 0.9 * made["mix"]["restart"] > 0
    assert judged[("zombie", False, "fenced")] >= 0.9 * made["mix"]["zombie"], judged
