"""Replay benchmark for the rationalizer (figures, not pass/fail).

Generates a realistic coordination log (~90% heartbeats; claims and lost races, releases,
AMO ClaimingMessages, restarts, a few ReleaseGroups with admin positions, invalid records;
thousands of partitions across several groups whose members use different heartbeat
intervals; one group has an admin key, so its ReleaseGroup and admin position heartbeats are
HMAC-tagged and verified), routes it to N coordination partitions and replays it through
WorldState. In the same run, a naive baseline (JSON values folded into
dicts, same rules) replays the same events for the ratio.

    python bench/rationalizer.py [--records N] [--partitions-per-topic P] [--seed S]
                                 [--baseline-ref REF]

``--baseline-ref REF`` (e.g. ``main``) also loads ``rationalizer/`` as it is at git ref REF
(``git archive``, imported as the package ``rationalizer_baseline``), replays the same
generated log through both in the same run (alternating, best of each), checks that both
reach the same verdicts and snapshot bytes, and prints both rates and their ratio.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import hmac
import importlib.util
import io
import json
import random
import resource
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rationalizer import (
    ClaimingPartition,
    Heartbeat,
    HeartbeatingTask,
    ReleaseGroup,
    ReleasingPartition,
    ReleasingTask,
    WorldState,
    coordination_partition,
    encode,
    sign,
)
from rationalizer._codec import (
    T_CLAIMING_MESSAGES,
    T_CLAIMING_PARTITION,
    T_HEARTBEAT,
    T_RELEASING_PARTITION,
)
from rationalizer._messages import FUTURE_VERSIONS
from rationalizer._varint import uvarint

HB_MS = 3000  # the fastest lease; the log advances so every partition beats about every HB_MS/3
N_COORD = 8
GROUPS = ("billing", "search-indexer", "audit", "email")
#: Each group's members declare their own lease (mixed HBs share every world).
GROUP_HB_MS = {"billing": 3000, "search-indexer": 10_000, "audit": 3000, "email": 30_000}
#: "billing" has an admin key: its admin records are tagged, and verified by every replay.
ADMIN_KEYS = {"billing": b"bench-admin-key-0123456789abcdef"}
TOPICS = ("orders", "payments", "clicks")
CONSUMERS_PER_GROUP = 24
_Q = struct.Struct(">q")
_I = struct.Struct(">I")
TYPE_NAMES = {1: "hb", 2: "claim", 3: "release", 4: "claim_msgs"}


def generate(n_records: int, parts_per_topic: int, seed: int):
    """Return (binary, json) record lists per coordination partition, plus a mix summary."""
    rng = random.Random(seed)
    partitions = [(g, t, p) for g in GROUPS for t in TOPICS for p in range(parts_per_topic)]
    coord = {
        (t, p): coordination_partition(t, p, N_COORD)
        for t in TOPICS
        for p in range(parts_per_topic)
    }
    instance_of = {
        (g, c): f"{g}-c{c}-i0-{rng.getrandbits(48):012x}"
        for g in GROUPS
        for c in range(CONSUMERS_PER_GROUP)
    }
    suffix_cache: dict[tuple, tuple[bytes, bytes]] = {}

    def template(client: str, instance: str, g: str, t: str, p: int) -> tuple[bytes, bytes]:
        """(key, identity part: ids, topic, partition) of one sender and partition."""
        k = (client, instance, g, t, p)
        hit = suffix_cache.get(k)
        if hit is None:
            key, value = encode(
                ReleasingPartition(
                    client_id=client,
                    instance_id=instance,
                    group_id=g,
                    topic=t,
                    partition=p,
                    last_offset=0,
                )
            )
            hit = suffix_cache[k] = (key, value[10:])
        return hit

    binary: list[list] = [[] for _ in range(N_COORD)]
    js: list[list] = [[] for _ in range(N_COORD)]
    offsets = [0] * N_COORD
    mix: dict[str, int] = {}

    def emit(
        cp: int, ts: int, typ: int, client: str, instance: str, g: str, t: str, p: int, n: int = 0
    ):
        hbms = GROUP_HB_MS[g]
        if typ == T_HEARTBEAT and client == "admin" and g in ADMIN_KEYS:
            key, value = encode(
                sign(
                    Heartbeat(
                        client_id=client,
                        instance_id=instance,
                        group_id=g,
                        topic=t,
                        partition=p,
                        last_offset=n,
                        heartbeat_interval_ms=hbms,
                    ),
                    ADMIN_KEYS[g],
                )
            )
        else:
            key, ident = template(client, instance, g, t, p)
            if typ == T_CLAIMING_PARTITION:
                value = b"\x01\x02" + _I.pack(hbms) + ident
            elif typ == T_HEARTBEAT:
                value = b"\x01\x01" + _Q.pack(n) + _I.pack(hbms) + b"\x00" + ident
            else:
                value = bytes((1, typ)) + _Q.pack(n) + ident
        off = offsets[cp]
        offsets[cp] += 1
        binary[cp].append((off, ts, key, value))
        js[cp].append(
            (
                off,
                ts,
                key,
                json.dumps(
                    {
                        "v": 1,
                        "type": TYPE_NAMES[typ],
                        "client_id": client,
                        "instance_id": instance,
                        "group_id": g,
                        "topic": t,
                        "partition": p,
                        "n": n,
                        "hb": hbms,
                    }
                    | _json_tag(g, typ, client, n),
                ).encode(),
            )
        )
        mix[TYPE_NAMES[typ]] = mix.get(TYPE_NAMES[typ], 0) + 1

    def emit_raw(cp: int, ts: int, key, value, jvalue, kind: str):
        off = offsets[cp]
        offsets[cp] += 1
        binary[cp].append((off, ts, key, value))
        js[cp].append((off, ts, key, jvalue))
        mix[kind] = mix.get(kind, 0) + 1

    holder: dict[tuple, tuple[str, str] | None] = {}
    position = dict.fromkeys(partitions, 0)
    paused_until: dict[str, int] = {}
    order = partitions[:]
    rng.shuffle(order)
    i = 0
    total = 0
    # log time advances so that each partition beats about every HB/3
    step_us = max(1, (HB_MS * 1000 // 3) // len(partitions))
    t_us = 0
    while total < n_records:
        t_us += step_us
        ts = t_us // 1000
        gtp = order[i % len(order)]
        i += 1
        g, t, p = gtp
        cp = coord[(t, p)]
        if paused_until.get(g, -1) > ts:
            # the admin sets positions while the group is paused
            emit(cp, ts, T_HEARTBEAT, "admin", "admin-1", g, t, p, position[gtp])
            total += 1
            continue
        h = holder.get(gtp)
        r = rng.random()
        if h is None:
            c = rng.randrange(CONSUMERS_PER_GROUP)
            h = (f"{g}-c{c}", instance_of[(g, c)])
            emit(cp, ts, T_CLAIMING_PARTITION, h[0], h[1], g, t, p)
            holder[gtp] = h
            total += 1
            if rng.random() < 0.3:  # lost race
                c2 = rng.randrange(CONSUMERS_PER_GROUP)
                emit(cp, ts, T_CLAIMING_PARTITION, f"{g}-c{c2}", instance_of[(g, c2)], g, t, p)
                total += 1
            continue
        position[gtp] += rng.randrange(1, 200)
        if r < 0.02:  # AMO: claim messages, then the commit heartbeat
            emit(cp, ts, T_CLAIMING_MESSAGES, h[0], h[1], g, t, p, position[gtp] + 50)
            position[gtp] += 50
            emit(cp, ts, T_HEARTBEAT, h[0], h[1], g, t, p, position[gtp])
            total += 2
        elif r < 0.025:  # clean release
            emit(cp, ts, T_RELEASING_PARTITION, h[0], h[1], g, t, p, position[gtp])
            holder[gtp] = None
            total += 1
        elif r < 0.027:  # a heartbeat from someone who does not hold it
            c = rng.randrange(CONSUMERS_PER_GROUP)
            emit(cp, ts, T_HEARTBEAT, f"{g}-stranger{c}", "zombie", g, t, p, position[gtp])
            total += 1
        elif r < 0.0275:  # restart recovery by a new instance of the holder's client
            c = int(h[0].rsplit("-c", 1)[1])
            inst = f"{g}-c{c}-i{rng.getrandbits(32):08x}"
            instance_of[(g, c)] = inst
            for other in partitions:
                if holder.get(other) == h:
                    holder[other] = (h[0], inst)
            emit(cp, ts, T_HEARTBEAT, h[0], inst, g, t, p, position[gtp])
            total += 1
        elif r < 0.0285:  # invalid record
            junk = bytes(rng.getrandbits(8) for _ in range(20))
            if junk[0] in FUTURE_VERSIONS:  # (that would stop replay: PROTOCOL.md "Version 4")
                junk = bytes((junk[0] | 0x80,)) + junk[1:]
            emit_raw(cp, ts, b"garbage", junk, b"{not json", "invalid")
            total += 1
        elif r < 0.028505 and len(paused_until) < 4:  # rare: an admin resets a group
            end = ts + 2000
            rg = ReleaseGroup(
                client_id="admin", instance_id="admin-1", group_id=g, msg_expire_time=end
            )
            if g in ADMIN_KEYS:
                rg = sign(rg, ADMIN_KEYS[g])
            key, value = encode(rg)
            jv = json.dumps(
                {
                    "v": 1,
                    "type": "release_group",
                    "client_id": "admin",
                    "instance_id": "admin-1",
                    "group_id": g,
                    "n": end,
                }
                | _json_tag(g, 5, "admin", end)
            ).encode()
            for c2 in range(N_COORD):
                emit_raw(c2, ts, key, value, jv, "release_group")
            total += N_COORD
            paused_until[g] = end
            for other in partitions:
                if other[0] == g:
                    holder[other] = None
        else:
            emit(cp, ts, T_HEARTBEAT, h[0], h[1], g, t, p, position[gtp])
            total += 1
    return binary, js, mix, len(partitions)


def _json_tag(g: str, typ: int, client: str, n: int) -> dict:
    """The naive baseline's admin tag: HMAC-SHA256 over ``typ|client|n`` (as much work)."""
    if g not in ADMIN_KEYS or client != "admin" or typ not in (1, 5):
        return {}
    return {"tag": hmac.new(ADMIN_KEYS[g], f"{typ}|{client}|{n}".encode(), "sha256").hexdigest()}


def _json_tag_ok(m: dict, typ: int) -> bool:
    key = ADMIN_KEYS.get(m["group_id"])
    if key is None:
        return True
    want = hmac.new(key, f"{typ}|{m['client_id']}|{m['n']}".encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, m.get("tag", ""))


#: The task log (PROTOCOL.md, "Tasks (version 3)"): streams applications whose tasks are
#: claimed with ClaimingPartition on ``<app>.task.<i>/p`` and heartbeated and released with
#: the position of every co-partitioned source (2 or 3 here, one a long repartition topic).
TASK_APPS = {
    "wordcount": (
        ("lines", "lines2"),
        ("wordcount-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition", "words"),
    ),
    "sessions": (("clicks", "logins", "views"), ("sessions-by-user-repartition", "user-profiles")),
    "enrich": (("orders", "payments"), ("customers", "enriched-orders-repartition", "refunds")),
}
TASK_HB_MS = {"wordcount": 3000, "sessions": 10_000, "enrich": 30_000}
TASK_MEMBERS = 12


def generate_tasks(n_records: int, parts_per_topic: int, seed: int):
    """A log of well-behaved streams members (claims, a few lost races, HeartbeatingTask with
    2-3 sources, a few ReleasingTask and restart takeovers), routed to ``N_COORD``
    coordination partitions; returns ``(records per coordination partition, mix, tasks)``.

    Values are assembled from the identity part and the vector's bytes (as ``generate``
    does), checked against ``encode`` once per record type."""
    rng = random.Random(seed + 7919)
    tasks = [
        (app, f"{app}.task.{i}", sources, p)
        for app, subs in TASK_APPS.items()
        for i, sources in enumerate(subs)
        for p in range(parts_per_topic)
    ]
    rng.shuffle(tasks)
    instance_of = {
        (app, c): f"{app}-{c}-{rng.getrandbits(48):012x}"
        for app in TASK_APPS
        for c in range(TASK_MEMBERS)
    }
    # every source starts somewhere in a long-lived topic (offsets of 3-4 varint bytes)
    position = {t[1:4:2]: [rng.randrange(-1, 5_000_000) for _ in t[2]] for t in tasks}
    holder: dict[tuple[str, int], tuple[str, str] | None] = {}
    recovering: set[tuple[str, int]] = set()  # held by a restarted client's new instance
    idents: dict[tuple, tuple[bytes, bytes]] = {}
    out: list[list] = [[] for _ in range(N_COORD)]
    mix: dict[str, int] = {}
    checked: set[str] = set()

    def ident(client: str, instance: str, app: str, name: str, p: int) -> tuple[bytes, bytes]:
        k = (client, instance, app, name, p)
        hit = idents.get(k)
        if hit is None:
            key, value = encode(
                ReleasingPartition(
                    client_id=client,
                    instance_id=instance,
                    group_id=app,
                    topic=name,
                    partition=p,
                    last_offset=0,
                )
            )
            hit = idents[k] = (key, value[10:])
        return hit

    def emit(kind: str, ts: int, who: tuple[str, str], task: tuple) -> None:
        app, name, sources, p = task
        key, tail = ident(*who, app, name, p)
        hb = TASK_HB_MS[app]
        vector = position[(name, p)]
        if kind == "claim":
            value = b"\x01\x02" + _I.pack(hb) + tail
        else:
            body = bytes((len(sources),)) + b"".join(
                bytes((len(s),)) + s.encode() + uvarint(o + 1)
                for s, o in zip(sources, vector, strict=True)
            )
            value = (b"\x03\x08" + _I.pack(hb) if kind == "task_hb" else b"\x03\x09") + body + tail
        if kind not in checked:  # the same bytes as the codec's
            ids = {
                "client_id": who[0],
                "instance_id": who[1],
                "group_id": app,
                "topic": name,
                "partition": p,
            }
            vec = tuple(zip(sources, vector, strict=True))
            msg = (
                ClaimingPartition(**ids, heartbeat_interval_ms=hb)
                if kind == "claim"
                else HeartbeatingTask(**ids, heartbeat_interval_ms=hb, positions=vec)
                if kind == "task_hb"
                else ReleasingTask(**ids, positions=vec)
            )
            assert encode(msg) == (key, value), kind
            checked.add(kind)
        cp = coordination_partition(name, p, N_COORD)
        recs = out[cp]
        recs.append((len(recs), ts, key, value))
        mix[kind] = mix.get(kind, 0) + 1

    step_us = max(1, (HB_MS * 1000 // 3) // len(tasks))
    t_us = 0
    total = 0
    i = 0
    while total < n_records:
        t_us += step_us
        ts = t_us // 1000
        task = tasks[i % len(tasks)]
        i += 1
        app, name, _, p = task
        h = holder.get((name, p))
        if h is None:
            c = rng.randrange(TASK_MEMBERS)
            h = holder[(name, p)] = (f"{app}-{c}", instance_of[(app, c)])
            emit("claim", ts, h, task)
            total += 1
            if rng.random() < 0.1:  # lost race
                c2 = rng.randrange(TASK_MEMBERS)
                emit("claim", ts, (f"{app}-{c2}", instance_of[(app, c2)]), task)
                total += 1
            continue
        vector = position[(name, p)]
        for j in range(len(vector)):
            vector[j] += rng.randrange(0, 120)  # (an idle source stays put)
        r = rng.random()
        if r < 0.004 and (name, p) not in recovering:  # a rebalance: the holder releases it
            emit("task_release", ts, h, task)
            holder[(name, p)] = None
        elif r < 0.0045:  # restart recovery by a new instance of the holder's client
            c = int(h[0].rsplit("-", 1)[1])
            inst = instance_of[(app, c)] = f"{app}-{c}-{rng.getrandbits(48):012x}"
            for k, other in holder.items():
                if other == h:  # its first record there will be a takeover heartbeat
                    holder[k] = (h[0], inst)
                    recovering.add(k)
            emit("task_hb", ts, (h[0], inst), task)
            recovering.discard((name, p))
        else:
            emit("task_hb", ts, h, task)
            recovering.discard((name, p))
        total += 1
    return out, mix, len(tasks)


class NaiveWorld:
    """Baseline: JSON values folded into plain dicts, one call per record, same rules
    (the holder's own heartbeat interval, HMAC-checked admin records of keyed groups)."""

    def __init__(self) -> None:
        self.now = -(2**63)
        self.parts: dict = {}
        self.fenced: set = set()
        self.paused: dict = {}
        self.verdicts: dict = {}
        self.skipped = 0

    def apply(self, offset, ts, key, value):
        self.now = max(self.now, ts)
        now = self.now
        try:
            m = json.loads(value)
            if m["v"] != 1:
                raise ValueError
        except ValueError:
            self.skipped += 1
            self.verdicts[offset] = "invalid"
            return "invalid"
        me = (m["client_id"], m["instance_id"])
        g = m["group_id"]
        if me in self.fenced:
            v = "fenced"
        elif m["type"] == "release_group":
            if not _json_tag_ok(m, 5) or (g in ADMIN_KEYS and m["n"] <= now):
                v = "unauthenticated"
            else:
                for (pg, _, _), st in self.parts.items():
                    if pg == g:
                        st["holder"] = None
                self.paused[g] = (m["n"], me)
                v = "ok"
        else:
            k = (g, m["topic"], m["partition"])
            st = self.parts.get(k)
            pause = self.paused.get(g)
            typ = m["type"]
            if pause and now < pause[0]:
                if typ == "hb" and me == pause[1]:
                    if _json_tag_ok(m, 1):
                        st = self.parts.setdefault(
                            k, {"holder": None, "beat": now, "last": -1, "claimed": -1, "hb": 0}
                        )
                        st["last"] = st["claimed"] = m["n"]
                        v = "ok"
                    else:
                        v = "unauthenticated"
                else:
                    v = "paused"
            elif typ == "claim":
                if st is None:
                    self.parts[k] = {
                        "holder": me,
                        "beat": now,
                        "last": -1,
                        "claimed": -1,
                        "hb": m["hb"],
                    }
                    v = "ok"
                elif st["holder"] is None or now - st["beat"] > 2 * st["hb"]:
                    st["holder"], st["beat"], st["hb"] = me, now, m["hb"]
                    v = "ok"
                else:
                    v = "still_owned"
            elif st is None:
                v = "not_holder"
            elif typ == "hb":
                if st["holder"] == me:
                    st["beat"], st["last"], st["hb"] = now, m["n"], m["hb"]
                    v = "ok"
                elif st["holder"] and st["holder"][0] == me[0] and now - st["beat"] < st["hb"]:
                    self.fenced.add(st["holder"])
                    st["holder"], st["beat"], st["last"], st["hb"] = me, now, m["n"], m["hb"]
                    v = "ok"
                else:
                    v = "not_holder"
            elif st["holder"] != me:
                v = "not_holder"
            elif typ == "release":
                st["holder"], st["last"], st["beat"] = None, m["n"], now
                v = "ok"
            elif m["n"] >= st["claimed"]:
                st["claimed"], st["beat"] = m["n"], now
                v = "ok"
            else:
                v = "regression"
        self.verdicts[offset] = v
        return v


def load_baseline(ref: str, into: Path):
    """Import ``rationalizer/`` as it is at git ``ref`` under the name ``rationalizer_baseline``."""
    repo = Path(__file__).resolve().parents[1]
    tar = subprocess.run(
        ["git", "-C", str(repo), "archive", ref, "rationalizer"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        tf.extractall(into, filter="data")
    pkg = into / "rationalizer"
    name = "rationalizer_baseline"
    spec = importlib.util.spec_from_file_location(
        name, pkg / "__init__.py", submodule_search_locations=[str(pkg)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _verdict_tuple(v) -> tuple | None:
    """A verdict as plain data (the two packages' Verdict classes are distinct)."""
    if v is None:
        return None
    return (
        v.accepted,
        v.reason and v.reason.value,
        v.effect and v.effect.value,
        v.previous_holder,
        v.voided,
    )


def compare_baseline(
    ref: str, world_cls, logs: list[tuple[str, list, int]], changes: bool = False
) -> None:
    """Replay each ``(name, records per coordination partition, count)`` log with the current
    ``world_cls`` and with ``rationalizer/`` at ``ref``, alternating (so both see the same
    machine state), and print both rates side by side."""
    with tempfile.TemporaryDirectory() as tmp:  # kept: the package imports lazily too
        base = load_baseline(ref, Path(tmp))
        for name, binary, n in logs:
            _compare(ref, base, world_cls, name, binary, n, changes)


def _compare(ref: str, base, world_cls, name: str, binary: list, n: int, changes: bool) -> None:
    base_cls = base.WorldState

    def run(cls):
        worlds = [cls(admin_keys=ADMIN_KEYS) for _ in range(N_COORD)]
        t = time.perf_counter()
        outs = [w.apply_many(recs) for w, recs in zip(worlds, binary, strict=True)]
        return worlds, outs, time.perf_counter() - t

    new_worlds, new_out, _ = run(world_cls)
    base_worlds, base_out, _ = run(base_cls)
    same_bytes = [a.to_bytes() for a in new_worlds] == [b.to_bytes() for b in base_worlds]
    differing = sum(
        x != y
        for a, b in zip(new_out, base_out, strict=True)
        for x, y in zip(map(_verdict_tuple, a), map(_verdict_tuple, b), strict=True)
    )
    same_verdicts = differing == 0
    del new_worlds, new_out, base_worlds, base_out
    best = {world_cls: float("inf"), base_cls: float("inf")}
    for _ in range(5):
        for cls in (base_cls, world_cls):
            gc.collect()
            best[cls] = min(best[cls], run(cls)[2])
    t_new, t_base = best[world_cls], best[base_cls]
    print(f"baseline {ref} ({base.__name__}, loaded from git archive), {name}, same run:")
    print(f"  apply_many this tree   : {n / t_new:>12,.0f} records/s  ({t_new:.2f}s, best of 5)")
    print(f"  apply_many {ref:<12.12}: {n / t_base:>12,.0f} records/s  ({t_base:.2f}s, best of 5)")
    print(f"  ratio this tree / {ref}: {t_base / t_new:.3f}")
    print(
        f"  identical verdicts: {same_verdicts} ({differing:,} records judged differently);"
        f" identical snapshot bytes: {same_bytes}"
    )
    if not (same_verdicts and same_bytes) and not changes:
        raise SystemExit(f"this tree and {ref} disagree on the {name}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument(
        "--allow-rule-changes",
        action="store_true",
        help="with --baseline-ref: count the records judged differently (a baseline of an "
        "older protocol version) instead of stopping at the first difference",
    )
    ap.add_argument("--partitions-per-topic", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--baseline-ref",
        metavar="REF",
        default=None,
        help="also replay with rationalizer/ at this git ref, same log, same run (e.g. main)",
    )
    args = ap.parse_args()

    t0 = time.perf_counter()
    binary, js, mix, n_parts = generate(args.records, args.partitions_per_topic, args.seed)
    n = sum(len(x) for x in binary)
    print(
        f"python {sys.version.split()[0]}; generated {n:,} records in {time.perf_counter() - t0:.1f}s"
    )
    print(
        f"  {n_parts:,} partitions, {len(GROUPS)} groups x {CONSUMERS_PER_GROUP} consumers, {N_COORD} coordination partitions"
    )
    print(
        "  mix: "
        + ", ".join(
            f"{k} {v:,} ({v / n:.2%})" for k, v in sorted(mix.items(), key=lambda kv: -kv[1])
        )
    )

    def replay_many():
        worlds = [WorldState(admin_keys=ADMIN_KEYS) for _ in range(N_COORD)]
        t = time.perf_counter()
        for w, recs in zip(worlds, binary, strict=True):
            w.apply_many(recs)
        return worlds, time.perf_counter() - t

    def replay_single():
        worlds = [WorldState(admin_keys=ADMIN_KEYS) for _ in range(N_COORD)]
        t = time.perf_counter()
        for w, recs in zip(worlds, binary, strict=True):
            apply = w.apply
            for o, ts, k, v in recs:
                apply(o, ts, k, v)
        return worlds, time.perf_counter() - t

    def replay_naive():
        worlds = [NaiveWorld() for _ in range(N_COORD)]
        t = time.perf_counter()
        for w, recs in zip(worlds, js, strict=True):
            apply = w.apply
            for o, ts, k, v in recs:
                apply(o, ts, k, v)
        return worlds, time.perf_counter() - t

    t0 = time.perf_counter()
    tasks, task_mix, n_tasks = generate_tasks(args.records, args.partitions_per_topic, args.seed)
    n_task = sum(len(x) for x in tasks)
    print(
        f"task log: generated {n_task:,} records in {time.perf_counter() - t0:.1f}s; {n_tasks:,}"
        f" tasks of {len(TASK_APPS)} applications x {TASK_MEMBERS} members, 2-3 sources each"
    )
    print(
        "  mix: "
        + ", ".join(
            f"{k} {v:,} ({v / n_task:.2%})"
            for k, v in sorted(task_mix.items(), key=lambda kv: -kv[1])
        )
    )

    if args.baseline_ref is not None:
        compare_baseline(
            args.baseline_ref,
            WorldState,
            [("partition log", binary, n), ("task log", tasks, n_task)],
            args.allow_rule_changes,
        )

    def replay_tasks():
        worlds = [WorldState(admin_keys=ADMIN_KEYS) for _ in range(N_COORD)]
        t = time.perf_counter()
        for w, recs in zip(worlds, tasks, strict=True):
            w.apply_many(recs)
        return worlds, time.perf_counter() - t

    # the two logs alternately, so both see the same machine state (it is shared)
    gc.collect()
    best_many = best_tasks = float("inf")
    for _ in range(3):
        best_many = min(best_many, replay_many()[1])
        gc.collect()
        best_tasks = min(best_tasks, replay_tasks()[1])
        gc.collect()
    worlds, _ = replay_many()
    best_single = min(replay_single()[1] for _ in range(2))
    naive_worlds, best_naive = min((replay_naive() for _ in range(2)), key=lambda x: x[1])

    rej: dict = {}
    for w in worlds:
        for reason, c in w.rejections().items():
            rej[reason.value] = rej.get(reason.value, 0) + c
    accepted = n - sum(rej.values())
    print(
        f"verdicts: accepted {accepted:,}; rejected "
        + ", ".join(f"{k} {v:,}" for k, v in rej.items() if v)
    )
    naive_ok = sum(1 for w in naive_worlds for v in w.verdicts.values() if v == "ok")
    print(f"  (naive baseline accepted {naive_ok:,})")

    print(
        f"WorldState.apply_many : {n / best_many:>12,.0f} records/s  ({best_many:.2f}s, best of 3)"
    )
    print(
        f"  task log            : {n_task / best_tasks:>12,.0f} records/s  ({best_tasks:.2f}s, best of 3)"
    )
    print(
        f"  task log / partition log: {(n_task / best_tasks) / (n / best_many):.3f}"
        " (same run, alternating)"
    )
    task_rej: dict = {}
    for w in replay_tasks()[0]:
        for reason, c in w.rejections().items():
            if c:
                task_rej[reason.value] = task_rej.get(reason.value, 0) + c
    print(
        f"  task log verdicts: accepted {n_task - sum(task_rej.values()):,}; rejected "
        + ", ".join(f"{k} {v:,}" for k, v in task_rej.items())
    )
    print(
        f"WorldState.apply      : {n / best_single:>12,.0f} records/s  ({best_single:.2f}s, one call per record)"
    )
    print(f"naive JSON + dicts    : {n / best_naive:>12,.0f} records/s  ({best_naive:.2f}s)")
    print(
        f"ratio vs naive        : {best_naive / best_many:.1f}x (apply_many), {best_naive / best_single:.1f}x (apply)"
    )

    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    traced = [WorldState(admin_keys=ADMIN_KEYS) for _ in range(N_COORD)]
    for w, recs in zip(traced, binary, strict=True):
        w.apply_many(recs)
    cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"replay memory (tracemalloc, all {N_COORD} worlds): peak {(peak - base) / 2**20:.1f} MiB, retained {(cur - base) / 2**20:.1f} MiB"
    )
    print(
        f"process max RSS (incl. the generated input): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )

    t = time.perf_counter()
    snaps = [w.to_bytes() for w in worlds]
    t_dump = time.perf_counter() - t
    t = time.perf_counter()
    restored = [WorldState.from_bytes(s, admin_keys=ADMIN_KEYS) for s in snaps]
    t_load = time.perf_counter() - t
    assert [r.to_bytes() for r in restored] == snaps
    size = sum(len(s) for s in snaps)
    print(
        f"snapshots: {size / 2**20:.2f} MiB total ({size / N_COORD / 1024:.0f} KiB per world, verdict window {worlds[0].verdict_window:,}); "
        f"to_bytes {t_dump * 1000:.0f} ms, from_bytes {t_load * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
