from rationalizer import GroupView, WorldState, coordination_partition, encode

from .helpers import HB, beat, claim, release_group

N = 4


def _cluster():
    worlds = [WorldState() for _ in range(N)]
    offsets = [0] * N

    def put(msg, t, topic=None, partition=None):
        targets = range(N) if topic is None else [coordination_partition(topic, partition, N)]
        for i in targets:
            worlds[i].apply(offsets[i], t, *encode(msg))
            offsets[i] += 1

    return GroupView(worlds), put


def test_routes_and_merges():
    view, put = _cluster()
    for p in range(8):
        put(claim(f"c{p % 2}:1", p=p), 0, "orders", p)
        put(beat(f"c{p % 2}:1", 10 * p, p=p), 1, "orders", p)
    assert view.n == N
    for p in range(8):
        assert view.holder("g", "orders", p) == (f"c{p % 2}", "1")
        assert view.resume_offset("g", "orders", p) == 10 * p + 1
        assert view.freshness("g", "orders", p, 2) == "fresh"
        w = view.world_for("orders", p)
        assert w is view.worlds[coordination_partition("orders", p, N)]
    assert [c.partition for c in view.claims_of("g", "c1")] == [1, 3, 5, 7]
    assert [s.partition for s in view.partitions("g")] == list(range(8))
    assert view.claimable_partitions("g", [("orders", p) for p in range(10)], 5) == [
        ("orders", 8),
        ("orders", 9),
    ]
    assert view.claimable_partitions("g", [("orders", 0)], 2 * HB + 2) == [("orders", 0)]


def test_pause_seen_by_some_worlds_only():
    view, put = _cluster()
    assert view.paused_until("g") is None
    view.worlds[0].apply(0, 0, *encode(release_group("adm:x", 500)))
    assert view.paused_until("g") == 500 and not view.fully_paused("g")
    put(release_group("adm:x", 700), 1)
    assert view.paused_until("g") == 700 and view.fully_paused("g")


def test_freshness_is_each_holders_own_lease_in_every_world():
    view, put = _cluster()
    put(claim("fast:1", p=0, hb=100), 0, "orders", 0)
    put(claim("slow:1", p=1, hb=10_000), 0, "orders", 1)
    assert view.freshness("g", "orders", 0, 500) == "stale"
    assert view.freshness("g", "orders", 1, 500) == "fresh"
    assert view.claimable_partitions("g", [("orders", 0), ("orders", 1)], 500) == [("orders", 0)]
    assert [c.heartbeat_interval_ms for c in view.claims_of("g", "fast")] == [100]
