"""One test per transition rule and per rejection reason (PROTOCOL.md, "Transitions")."""

import pytest

from rationalizer import FRESH, STALE, UNKNOWN, Effect, Reason, WorldState, encode

from .helpers import HB, KEY, OTHER_KEY, Log, beat, claim, claim_msgs, release, release_group


def test_initial_state():
    w = WorldState()
    assert w.applied_through == -1
    assert w.holder("g", "orders", 0) is None
    assert w.freshness("g", "orders", 0, 0) is None
    assert w.claimable("g", "orders", 0, 0)
    assert w.resume_offset("g", "orders", 0) is None
    assert w.paused_until("g") is None
    assert w.verdict(0) is None
    assert w.skipped == 0


def test_constructor_takes_no_heartbeat_interval():
    with pytest.raises(TypeError):
        WorldState(HB)  # type: ignore[misc]
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ValueError):
            WorldState(verdict_window=bad)


# --- 1. ClaimingPartition -------------------------------------------------------------


def test_claim_unheld_partition():
    log = Log()
    v = log.put(claim("a:1"), 100)
    assert v.accepted and v.effect is Effect.CLAIMED and v.reason is None
    assert log.w.holder("g", "orders", 0) == ("a", "1")
    assert log.w.resume_offset("g", "orders", 0) is None  # a claim sets no position
    assert log.w.verdict(0) == v
    assert log.w.applied_through == 0


def test_two_claims_in_one_window_first_wins():
    log = Log()
    assert log.put(claim("a:1"), 100).accepted
    v = log.put(claim("b:1"), 100)
    assert not v.accepted and v.reason is Reason.STILL_OWNED
    assert log.w.holder("g", "orders", 0) == ("a", "1")
    assert log.w.rejections()[Reason.STILL_OWNED] == 1


def test_holder_reclaiming_its_fresh_partition_is_still_owned():
    log = Log()
    log.put(claim("a:1"), 100)
    assert log.put(claim("a:1"), 200).reason is Reason.STILL_OWNED


def test_claim_while_holder_unknown_but_not_stale_is_rejected():
    log = Log()
    log.put(claim("a:1"), 0)
    assert log.w.freshness("g", "orders", 0, HB) == UNKNOWN
    assert log.put(claim("b:1"), HB).reason is Reason.STILL_OWNED
    assert log.put(claim("b:1"), 2 * HB).reason is Reason.STILL_OWNED  # age == 2HB: unknown
    assert log.w.holder("g", "orders", 0) == ("a", "1")


def test_claim_takes_over_stale_holder():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(beat("a:1", 9), 10)
    assert not log.w.claimable("g", "orders", 0, 2 * HB + 10)
    assert log.w.claimable("g", "orders", 0, 2 * HB + 11)
    v = log.put(claim("b:1"), 2 * HB + 11)
    assert v.accepted and v.effect is Effect.TOOK_OVER_STALE and v.previous_holder == ("a", "1")
    assert log.w.holder("g", "orders", 0) == ("b", "1")
    assert log.w.resume_offset("g", "orders", 0) == 10  # position survives the takeover


def test_freshness_boundaries():
    log = Log()
    log.put(claim("a:1"), 1000)
    w = log.w
    assert w.freshness("g", "orders", 0, 1000) == FRESH
    assert w.freshness("g", "orders", 0, 1000 + HB - 1) == FRESH
    assert w.freshness("g", "orders", 0, 1000 + HB) == UNKNOWN
    assert w.freshness("g", "orders", 0, 1000 + 2 * HB) == UNKNOWN
    assert w.freshness("g", "orders", 0, 1000 + 2 * HB + 1) == STALE


def test_time_is_clamped_non_decreasing():
    log = Log()
    log.put(claim("a:1"), 5000)
    # A record stamped earlier (clock step back) is evaluated at t=5000, not at 0.
    v = log.put(claim("b:1"), 0)
    assert v.reason is Reason.STILL_OWNED
    assert log.w.now == 5000
    assert log.put(beat("a:1", 1), 10).effect is Effect.RENEWED
    assert log.w.partition_state("g", "orders", 0).last_beat == 5000
    # and a stale check uses the clamped time too
    v = log.put(claim("b:1"), 5000 + 2 * HB + 1)
    assert v.effect is Effect.TOOK_OVER_STALE


# --- 2. Heartbeat ---------------------------------------------------------------------


def test_heartbeat_from_holder_sets_position():
    log = Log()
    log.put(claim("a:1"), 0)
    v = log.put(beat("a:1", 41), 500)
    assert v.accepted and v.effect is Effect.RENEWED
    st = log.w.partition_state("g", "orders", 0)
    assert (st.last_beat, st.last_offset, st.resume_offset) == (500, 41, 42)


def test_heartbeat_without_claim_is_not_holder():
    log = Log()
    assert log.put(beat("a:1", 5), 0).reason is Reason.NOT_HOLDER
    log.put(claim("a:1"), 1)
    assert log.put(beat("b:1", 5), 2).reason is Reason.NOT_HOLDER
    assert log.w.partition_state("g", "orders", 0).last_offset == -1
    assert log.w.rejections()[Reason.NOT_HOLDER] == 2


def test_late_heartbeat_renews_a_claim_nobody_took():
    log = Log()
    log.put(claim("a:1"), 0)
    assert log.w.freshness("g", "orders", 0, 10 * HB) == STALE
    v = log.put(beat("a:1", 7), 10 * HB)
    assert v.accepted and v.effect is Effect.RENEWED_LATE
    assert log.w.freshness("g", "orders", 0, 10 * HB) == FRESH
    assert log.put(claim("b:1"), 10 * HB + 1).reason is Reason.STILL_OWNED


def test_late_heartbeat_after_someone_else_claimed_is_rejected():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(claim("b:1"), 3 * HB)
    assert log.put(beat("a:1", 7), 3 * HB + 1).reason is Reason.NOT_HOLDER


def test_restart_takeover_while_fresh_fences_old_instance():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(claim("a:1", p=1), 0)
    log.put(beat("a:1", 10), 100)
    v = log.put(beat("a:2", 10), HB - 1 + 100)  # age HB-1: fresh
    assert v.accepted and v.effect is Effect.RESTART_TAKEOVER and v.previous_holder == ("a", "1")
    w = log.w
    assert w.holder("g", "orders", 0) == ("a", "2")
    assert w.is_fenced("a", "1") and not w.is_fenced("a", "2")
    # every later message of the old instance on this coordination partition is fenced
    for msg in (
        beat("a:1", 11),
        beat("a:1", 11, p=1),
        release("a:1", 11),
        claim_msgs("a:1", 20),
        claim("a:1", p=2),
        release_group("a:1", 10**6),
    ):
        r = log.put(msg, HB + 200)
        assert r.reason is Reason.FENCED
    assert w.rejections()[Reason.FENCED] == 6
    # the old instance's other claim stays until the new instance takes it over too
    assert w.holder("g", "orders", 1) == ("a", "1")
    # p1's last accepted message was at t=0, so at HB+200 it is unknown: no restart recovery
    assert log.put(beat("a:2", 3, p=1), HB + 200).reason is Reason.NOT_HOLDER
    assert w.claims_of("g", "a")[0].instance_id == "2"


def test_restart_takeover_refused_once_unknown_or_stale():
    log = Log()
    log.put(claim("a:1"), 0)
    assert log.put(beat("a:2", 5), HB).reason is Reason.NOT_HOLDER  # unknown
    assert log.put(beat("a:2", 5), 3 * HB).reason is Reason.NOT_HOLDER  # stale
    assert not log.w.is_fenced("a", "1")
    v = log.put(claim("a:2"), 3 * HB)  # it must claim normally
    assert v.effect is Effect.TOOK_OVER_STALE and v.previous_holder == ("a", "1")
    # Deviation D1: taking over a stale claim of another instance of the same client fences
    # it, or the woken-up old instance could "restart-recover" the partition back.
    assert log.w.is_fenced("a", "1")
    assert log.put(beat("a:1", 5), 3 * HB + 1).reason is Reason.FENCED
    assert log.w.holder("g", "orders", 0) == ("a", "2")


def test_stale_takeover_by_other_client_fences_nobody():
    log = Log()
    log.put(claim("a:1"), 0)
    assert log.put(claim("b:1"), 3 * HB).effect is Effect.TOOK_OVER_STALE
    assert log.w.fenced() == []
    assert log.put(beat("a:1", 5), 3 * HB).reason is Reason.NOT_HOLDER


def test_restart_needs_same_client():
    log = Log()
    log.put(claim("a:1"), 0)
    assert log.put(beat("b:1", 5), 1).reason is Reason.NOT_HOLDER
    assert log.put(beat("b:2", 5), 1).reason is Reason.NOT_HOLDER


# --- 3. ReleasingPartition ------------------------------------------------------------


def test_release_by_holder():
    log = Log()
    log.put(claim("a:1"), 0)
    v = log.put(release("a:1", 99), 10)
    assert v.accepted and v.effect is Effect.RELEASED
    assert log.w.holder("g", "orders", 0) is None
    assert log.w.resume_offset("g", "orders", 0) == 100
    assert log.w.claimable("g", "orders", 0, 11)
    assert log.put(claim("b:1"), 11).effect is Effect.CLAIMED  # immediately, no wait
    assert log.put(beat("a:1", 5), 12).reason is Reason.NOT_HOLDER


def test_release_gives_back_reservations_beyond_its_position():
    """Rule 6: an AMO holder closing with a reserved batch it never handed out
    releases at what it did hand out; the next holder resumes right after it."""
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(beat("a:1", 9), 1)
    assert log.put(claim_msgs("a:1", 19), 2).accepted  # reserved 10..19, never handed out
    assert log.w.resume_offset("g", "orders", 0) == 20
    assert log.put(release("a:1", 9), 3).effect is Effect.RELEASED
    state = log.w.partition_state("g", "orders", 0)
    assert (state.last_offset, state.claimed_through) == (9, 9)
    assert log.w.resume_offset("g", "orders", 0) == 10
    log.put(claim("b:1"), 4)
    assert log.put(claim_msgs("b:1", 8), 5).reason is Reason.OFFSET_REGRESSION
    assert log.put(claim_msgs("b:1", 14), 6).accepted


def test_release_by_non_holder_rejected():
    log = Log()
    assert log.put(release("a:1", 5), 0).reason is Reason.NOT_HOLDER
    log.put(claim("a:1"), 0)
    assert log.put(release("b:1", 5), 0).reason is Reason.NOT_HOLDER
    assert log.put(release("a:2", 5), 0).reason is Reason.NOT_HOLDER  # new instance: not holder
    assert log.w.holder("g", "orders", 0) == ("a", "1")


# --- 4. ClaimingMessages / AMO ------------------------------------------------------------


def test_claiming_messages_and_resume_max():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(beat("a:1", 9), 1)
    v = log.put(claim_msgs("a:1", 19), 2)
    assert v.accepted and v.effect is Effect.MESSAGES_CLAIMED
    st = log.w.partition_state("g", "orders", 0)
    assert (st.claimed_through, st.last_beat, st.last_offset) == (19, 2, 9)
    assert log.w.resume_offset("g", "orders", 0) == 20
    assert log.put(claim_msgs("a:1", 19), 3).accepted  # equal is fine


def test_claiming_messages_regression_rejected():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(claim_msgs("a:1", 19), 1)
    v = log.put(claim_msgs("a:1", 18), 2)
    assert v.reason is Reason.OFFSET_REGRESSION
    st = log.w.partition_state("g", "orders", 0)
    assert (st.claimed_through, st.last_beat) == (19, 1)


def test_claiming_messages_from_non_holder():
    log = Log()
    assert log.put(claim_msgs("a:1", 5), 0).reason is Reason.NOT_HOLDER
    log.put(claim("a:1"), 0)
    assert log.put(claim_msgs("b:1", 5), 0).reason is Reason.NOT_HOLDER


def test_amo_resume_after_claimed_messages_whose_commit_heartbeat_never_came():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(beat("a:1", 9), 10)
    log.put(claim_msgs("a:1", 19), 20)  # a then dies before heartbeating 19
    v = log.put(claim("b:1"), 20 + 2 * HB + 1)
    assert v.effect is Effect.TOOK_OVER_STALE
    # messages 10..19 may have been handed out: never again
    assert log.w.resume_offset("g", "orders", 0) == 20


def test_claiming_messages_keeps_claim_fresh():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(claim_msgs("a:1", 5), 2 * HB)
    assert log.put(claim("b:1"), 2 * HB + HB).reason is Reason.STILL_OWNED


# --- 5. ReleaseGroup --------------------------------------------------------------------


def test_release_group_full_cycle():
    log = Log()
    log.put(claim("a:1", p=0), 0)
    log.put(claim("b:1", p=1), 0)
    log.put(claim("c:1", p=0, g="other"), 0)
    log.put(beat("a:1", 50, p=0), 10)
    v = log.put(release_group("adm:x", 5000), 100)
    assert v.accepted and v.effect is Effect.GROUP_PAUSED
    assert v.voided == (("orders", 0, "a", "1"), ("orders", 1, "b", "1"))
    w = log.w
    assert w.paused_until("g") == 5000 and w.pause_admin("g") == ("adm", "x")
    assert w.holder("g", "orders", 0) is None
    assert w.holder("other", "orders", 0) == ("c", "1")  # other groups untouched
    assert not w.claimable("g", "orders", 0, 4999)
    assert w.claimable("g", "orders", 0, 5000)
    # consumer messages are rejected while paused, claims included
    for msg in (
        claim("a:1"),
        beat("a:1", 60),
        release("a:1", 60),
        claim_msgs("a:1", 70),
        claim("z:1", p=7),
    ):
        assert log.put(msg, 200).reason is Reason.GROUP_PAUSED
    # the admin's heartbeats set positions, for known and never-seen partitions
    assert log.put(beat("adm:x", 1000, p=0), 300).effect is Effect.POSITION_SET
    assert log.put(beat("adm:x", 7, p=9), 300).effect is Effect.POSITION_SET
    assert w.holder("g", "orders", 0) is None and w.holder("g", "orders", 9) is None
    assert w.resume_offset("g", "orders", 0) == 1001
    assert w.resume_offset("g", "orders", 9) == 8
    # the admin cannot claim either
    assert log.put(claim("adm:x"), 400).reason is Reason.GROUP_PAUSED
    assert log.put(claim("a:1"), 4999).reason is Reason.GROUP_PAUSED
    # from E on, claims work again at the positions set
    v = log.put(claim("a:1"), 5000)
    assert v.effect is Effect.CLAIMED
    assert w.paused_until("g") is None
    assert w.resume_offset("g", "orders", 0) == 1001
    assert log.put(beat("adm:x", 5, p=9), 5001).reason is Reason.NOT_HOLDER
    assert w.rejections()[Reason.GROUP_PAUSED] == 7


def test_admin_position_resets_claimed_through_down():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(claim_msgs("a:1", 500), 1)
    log.put(release_group("adm:x", 1000), 2)
    log.put(beat("adm:x", 99), 3)
    st = log.w.partition_state("g", "orders", 0)
    assert (st.last_offset, st.claimed_through, st.resume_offset) == (99, 99, 100)


def test_later_release_group_replaces_window_and_admin():
    log = Log()
    log.put(release_group("adm:x", 5000), 0)
    log.put(release_group("adm:y", 3000), 1)
    assert log.w.pause_admin("g") == ("adm", "y") and log.w.paused_until("g") == 3000
    assert log.put(beat("adm:x", 5), 2).reason is Reason.GROUP_PAUSED
    assert log.put(beat("adm:y", 5), 2).effect is Effect.POSITION_SET
    assert log.put(claim("a:1"), 3000).accepted  # the earlier, longer window is gone


def test_release_group_already_expired_ends_pause_and_voids():
    log = Log()
    log.put(release_group("adm:x", 5000), 0)
    v = log.put(release_group("adm:x", 10), 100)
    assert v.effect is Effect.GROUP_PAUSED and v.voided == ()
    assert log.w.paused_until("g") is None
    log.put(claim("a:1"), 101)
    assert log.put(release_group("adm:x", 50), 102).voided == (("orders", 0, "a", "1"),)
    assert log.w.holder("g", "orders", 0) is None


# --- 6. Invalid records -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, None),
        (b"g/orders/0", None),
        (b"", b""),
        (b"g/orders/0", b"\x01"),
        (b"g/orders/0", b"\x00" + encode(claim("a:1"))[1][1:]),  # not a version
        (b"g/orders/0", b"\x80" + encode(claim("a:1"))[1][1:]),  # nor a version to come
        (b"g/orders/0", b"\x01\x63" + encode(claim("a:1"))[1][2:]),  # unknown type
        (b"g/orders/1", encode(claim("a:1"))[1]),  # key mismatch
        (encode(claim("a:1"))[0], encode(claim("a:1"))[1] + b"\x00"),
        ("g/orders/0", "text"),
        (12, 34),
    ],
)
def test_invalid_records_are_skipped_and_counted(key, value):
    log = Log()
    log.put(claim("b:1"), 0)
    v = log.raw(key, value, 7)
    assert not v.accepted and v.reason is Reason.INVALID_RECORD
    assert log.w.skipped == 1
    assert log.w.applied_through == 1 and log.w.now == 7  # log time still advances
    assert log.w.holder("g", "orders", 0) == ("b", "1")


def test_cache_never_lets_a_bad_key_through():
    log = Log()
    k, v = encode(claim("a:1"))
    assert log.raw(k, v, 0).accepted
    k2, v2 = encode(beat("a:1", 3))
    assert log.raw(k2, v2, 1).accepted  # identity now cached
    assert log.raw(b"g/orders/1", v2, 2).reason is Reason.INVALID_RECORD
    assert (
        log.raw(k2, v2[:2] + (-7).to_bytes(8, "big", signed=True) + v2[10:], 3).reason
        is Reason.INVALID_RECORD
    )
    assert log.raw(k2, bytearray(v2), 4).accepted  # bytearray works, via the slow path


# --- replay bookkeeping -------------------------------------------------------------------


def test_redelivered_offsets_are_ignored_and_return_recorded_verdict():
    log = Log()
    k, v = encode(claim("a:1"))
    first = log.w.apply(0, 0, k, v)
    k2, v2 = encode(claim("b:1"))
    assert log.w.apply(0, 50, k2, v2) == first  # same offset, different content: ignored
    assert log.w.applied_through == 0 and log.w.now == 0
    assert log.w.apply(5, 10, k2, v2).reason is Reason.STILL_OWNED  # gaps are fine
    assert log.w.apply(3, 10, k2, v2) is None  # never applied
    assert log.w.verdict(5).reason is Reason.STILL_OWNED


def test_bad_offset_or_timestamp_arguments_raise_without_changing_state():
    w = WorldState()
    k, v = encode(claim("a:1"))
    before = w.to_bytes()
    for off, ts in ((1.5, 0), ("1", 0), (2**63, 0), (1, 1.5), (1, 2**63), (1, None)):
        with pytest.raises((TypeError, ValueError, OverflowError)):
            w.apply(off, ts, k, v)
        assert w.to_bytes() == before


def test_bad_timestamps_raise_also_when_they_do_not_move_time_forward():
    """Once a bug: 1.5, True and -2**70 were accepted once log time was past them."""
    w = WorldState()
    k, v = encode(claim("a:1"))
    w.apply(0, 1_000, k, v)
    before = w.to_bytes()
    for ts in (1.5, True, False, -(2**70), -(2**63) - 1, 500.0):
        with pytest.raises((TypeError, ValueError, OverflowError)):
            w.apply(1, ts, k, v)
        with pytest.raises((TypeError, ValueError, OverflowError)):
            w.apply_many([(1, ts, k, v)])
        assert w.to_bytes() == before and w.applied_through == 0
    assert w.apply(1, -(2**63), k, v) is not None  # the smallest int64 is a timestamp
    assert w.now == 1_000  # and it does not move log time backwards


def test_verdict_window_keeps_the_recent_verdicts():
    w = WorldState(verdict_window=4)
    k, v = encode(beat("a:1", 1))
    for off in range(20):
        w.apply(off, off, k, v)
    assert all(w.verdict(off) is not None for off in range(16, 20))
    assert w.verdict(0) is None
    assert w.apply(0, 0, k, v) is None


def test_claims_of_and_partitions():
    log = Log()
    log.put(claim("a:1", p=2), 0)
    log.put(claim("a:1", p=1), 0)
    log.put(claim("b:1", p=3), 0)
    log.put(claim("a:1", p=0, g="h"), 0)
    cl = log.w.claims_of("g", "a")
    assert [(c.topic, c.partition, c.client_id, c.instance_id) for c in cl] == [
        ("orders", 1, "a", "1"),
        ("orders", 2, "a", "1"),
    ]
    assert [s.partition for s in log.w.partitions("g")] == [1, 2, 3]
    assert len(log.w.partitions()) == 4


# --- the holder's heartbeat interval (its lease) decides its freshness ---------------------


def test_split_brain_example_every_reader_agrees():
    """The example of docs/protocol-notes.md (D2): before HB was in the log, a reader configured with HB=1000
    saw the holder stale at t=2500 and accepted b's claim, a reader with HB=3000 rejected it.
    Now the holder's own HB (3000) decides, so there is one verdict, for every reader."""
    log = Log()
    log.put(claim("a:1", hb=3000), 0)
    v = log.put(claim("b:1", hb=1000), 2500)
    assert v.reason is Reason.STILL_OWNED
    assert log.w.holder("g", "orders", 0) == ("a", "1")
    assert log.w.freshness("g", "orders", 0, 2500) == FRESH  # 2500 < 3000
    # and the other way round: a short lease is stale for every reader after 2*HB
    log.put(claim("c:1", hb=200, p=1), 3000)
    assert log.put(claim("d:1", hb=60_000, p=1), 3400).reason is Reason.STILL_OWNED
    assert log.put(claim("d:1", hb=60_000, p=1), 3401).effect is Effect.TOOK_OVER_STALE


def test_freshness_and_claimable_use_the_holders_interval():
    log = Log()
    log.put(claim("a:1", hb=500), 0)
    log.put(claim("b:1", hb=5000, p=1), 0)
    w = log.w
    assert [w.freshness("g", "orders", p, 600) for p in (0, 1)] == [UNKNOWN, FRESH]
    assert [w.freshness("g", "orders", p, 1001) for p in (0, 1)] == [STALE, FRESH]
    assert [w.claimable("g", "orders", p, 1001) for p in (0, 1)] == [True, False]
    assert w.freshness("g", "orders", 1, 10_001) == STALE
    assert w.partition_state("g", "orders", 0).heartbeat_interval_ms == 500
    assert [c.heartbeat_interval_ms for c in w.claims_of("g", "a")] == [500]


def test_renewal_records_the_new_interval_after_judging_with_the_old():
    log = Log()
    log.put(claim("a:1", hb=100), 0)
    # late by the old lease (age 250 > 2*100), although fresh by the new one
    assert log.put(beat("a:1", 1, hb=1000), 250).effect is Effect.RENEWED_LATE
    assert log.w.partition_state("g", "orders", 0).heartbeat_interval_ms == 1000
    assert log.put(claim("b:1", hb=100), 250 + 2000).reason is Reason.STILL_OWNED
    assert log.put(beat("a:1", 2, hb=50), 250 + 2000).effect is Effect.RENEWED
    assert log.put(claim("b:1"), 250 + 2000 + 101).effect is Effect.TOOK_OVER_STALE
    assert log.w.partition_state("g", "orders", 0).heartbeat_interval_ms == HB  # b's


def test_restart_takeover_judged_with_old_lease_records_new():
    log = Log()
    log.put(claim("a:1", hb=5000), 0)
    # fresh by a's lease of 5000 although the new instance configures 100
    v = log.put(beat("a:2", 3, hb=100), 4999)
    assert v.effect is Effect.RESTART_TAKEOVER
    assert log.w.partition_state("g", "orders", 0).heartbeat_interval_ms == 100
    assert log.w.freshness("g", "orders", 0, 4999 + 201) == STALE
    log2 = Log()
    log2.put(claim("a:1", hb=100), 0)
    assert log2.put(beat("a:2", 3, hb=5000), 100).reason is Reason.NOT_HOLDER  # unknown


def test_claiming_messages_keeps_release_clears_the_interval():
    log = Log()
    log.put(claim("a:1", hb=700), 0)
    log.put(claim_msgs("a:1", 9), 1000)
    st = log.w.partition_state("g", "orders", 0)
    assert (st.last_beat, st.heartbeat_interval_ms) == (1000, 700)
    log.put(release("a:1", 9), 1001)
    assert log.w.partition_state("g", "orders", 0).heartbeat_interval_ms is None


def test_release_group_clears_intervals_and_position_set_does_not_record_one():
    log = Log()
    log.put(claim("a:1", hb=700), 0)
    log.put(release_group("adm:x", 100), 1)
    log.put(beat("adm:x", 5, p=3, hb=9), 2)
    for p in (0, 3):
        st = log.w.partition_state("g", "orders", p)
        assert st.holder is None and st.heartbeat_interval_ms is None
    assert log.put(claim("b:1", hb=42), 100).effect is Effect.CLAIMED
    assert log.w.partition_state("g", "orders", 0).heartbeat_interval_ms == 42


# --- positions: "none" is not "before offset 0" -----------------------------------------


def _position(log: Log, p: int = 0) -> tuple[bool, int, int, int | None]:
    st = log.w.partition_state("g", "orders", p)
    return (
        st.has_position,
        st.last_offset,
        st.claimed_through,
        log.w.resume_offset("g", "orders", p),
    )


NO_POSITION = (False, -1, -1, None)


def test_a_claim_alone_sets_no_position():
    log = Log()
    log.put(claim("a:1"), 0)
    assert _position(log) == NO_POSITION
    st = log.w.partition_state("g", "orders", 0)
    assert st.resume_offset == 0  # the raw formula; has_position tells it apart from -1 + 1


@pytest.mark.parametrize(
    ("record", "effect", "want"),
    [
        (beat("a:1", -1), Effect.RENEWED, (True, -1, -1, 0)),
        (beat("a:2", -1), Effect.RESTART_TAKEOVER, (True, -1, -1, 0)),
        (release("a:1", -1), Effect.RELEASED, (True, -1, -1, 0)),
        (claim_msgs("a:1", -1), Effect.MESSAGES_CLAIMED, (True, -1, -1, 0)),
        (claim_msgs("a:1", 9), Effect.MESSAGES_CLAIMED, (True, -1, 9, 10)),
        (beat("a:1", 4), Effect.RENEWED, (True, 4, -1, 5)),
    ],
)
def test_every_accepted_holder_record_sets_a_position_even_minus_one(record, effect, want):
    log = Log()
    log.put(claim("a:1"), 0)
    assert log.put(record, 10).effect is effect
    assert _position(log) == want


def test_the_heartbeat_lane_sets_a_position_too():
    """b:1's heartbeat is rejected before its claim but opens the cached lane; the same bytes
    after the claim take the lane, which must record the position as the slow path does."""
    log = Log()
    log.put(claim("a:1"), 0)
    assert log.put(beat("b:1", -1), 1).reason is Reason.NOT_HOLDER
    assert _position(log) == NO_POSITION
    assert log.put(claim("b:1"), 1 + 2 * HB + 1).effect is Effect.TOOK_OVER_STALE
    assert _position(log) == NO_POSITION
    assert log.put(beat("b:1", -1), 2 * HB + 3).effect is Effect.RENEWED
    assert _position(log) == (True, -1, -1, 0)


def test_rejected_records_set_no_position():
    log = Log()
    log.put(claim("a:1"), 0)
    for msg in (beat("b:1", 5), release("b:1", 5), claim_msgs("b:1", 5), claim("b:1")):
        assert not log.put(msg, 1).accepted
    log.put(release_group("adm:x", 100), 2)
    for msg in (beat("a:1", 5), release("a:1", 5), claim_msgs("a:1", 5), beat("z:1", 5)):
        assert log.put(msg, 3).reason is Reason.GROUP_PAUSED
    assert _position(log) == NO_POSITION


def test_group_reset_and_takeovers_keep_no_position_as_none():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(release_group("adm:x", 100), 1)  # voids the claim, sets nothing
    assert _position(log) == NO_POSITION
    log.put(claim("b:1"), 100)
    log.put(claim("c:1"), 100 + 2 * HB + 1)  # stale takeover
    assert log.w.holder("g", "orders", 0) == ("c", "1")
    assert _position(log) == NO_POSITION


def test_admin_reset_to_minus_one_is_a_position_before_offset_0():
    """``group reset --to-earliest`` on a log starting at 0 writes last_offset = -1: that
    must read back as "resume at 0", not as "no position" (both for a partition the group
    only ever claimed and for one it never mentioned)."""
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(beat("a:1", 70), 1)
    log.put(claim("a:1", p=1), 1)
    log.put(release_group("adm:x", 100), 2)
    for p in (0, 1, 2):
        assert log.put(beat("adm:x", -1, p=p), 3).effect is Effect.POSITION_SET
        assert _position(log, p) == (True, -1, -1, 0)
    log.put(claim("b:1"), 100)
    assert _position(log) == (True, -1, -1, 0)  # claims keep it


def test_a_position_once_set_is_never_lost():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(release("a:1", -1), 1)
    log.put(release_group("adm:x", 100), 2)
    log.put(claim("b:1"), 200)
    log.put(claim("c:1"), 200 + 2 * HB + 1)
    assert _position(log) == (True, -1, -1, 0)


# --- authenticated admin (groups with an admin key) -----------------------------------------


def _keyed(**more) -> Log:
    return Log(admin_keys={"g": KEY, **more})


def test_keyed_group_accepts_only_tagged_release_group():
    log = _keyed()
    log.put(claim("a:1"), 0)
    for rg in (
        release_group("adm:x", 5000),  # untagged
        release_group("adm:x", 5000, key=OTHER_KEY),  # wrong key
    ):
        v = log.put(rg, 10)
        assert not v.accepted and v.reason is Reason.UNAUTHENTICATED
    assert log.w.holder("g", "orders", 0) == ("a", "1")  # nothing changed
    assert log.w.paused_until("g") is None
    assert log.w.rejections()[Reason.UNAUTHENTICATED] == 2
    v = log.put(release_group("adm:x", 5000, key=KEY), 10)
    assert v.effect is Effect.GROUP_PAUSED and v.voided == (("orders", 0, "a", "1"),)
    assert log.w.paused_until("g") == 5000


def test_keyed_group_pause_admin_heartbeats_need_a_tag():
    log = _keyed()
    log.put(release_group("adm:x", 5000, key=KEY), 0)
    assert log.put(beat("adm:x", 7), 1).reason is Reason.UNAUTHENTICATED
    assert log.put(beat("adm:x", 7, key=OTHER_KEY), 2).reason is Reason.UNAUTHENTICATED
    assert log.w.resume_offset("g", "orders", 0) is None
    assert log.put(beat("adm:x", 7, key=KEY), 3).effect is Effect.POSITION_SET
    assert log.w.resume_offset("g", "orders", 0) == 8
    # the same untagged bytes again (cached identity): still rejected
    assert log.put(beat("adm:x", 9), 4).reason is Reason.UNAUTHENTICATED
    # someone else, tagged or not, is simply paused
    assert log.put(beat("z:1", 9, key=KEY), 5).reason is Reason.GROUP_PAUSED
    assert log.put(claim("z:1"), 5).reason is Reason.GROUP_PAUSED
    assert log.w.resume_offset("g", "orders", 0) == 8


def test_keyed_group_rejects_a_replayed_release_group_after_its_window():
    log = _keyed()
    old = release_group("adm:x", 5000, key=KEY)
    assert log.put(old, 0).accepted
    log.put(claim("a:1"), 5000)
    # an attacker copies the tagged record and writes it again later
    v = log.put(old, 6000)
    assert v.reason is Reason.UNAUTHENTICATED
    assert log.w.holder("g", "orders", 0) == ("a", "1")
    # a fresh tagged record whose expiry is already past is refused the same way
    assert log.put(release_group("adm:y", 6000, key=KEY), 6000).reason is Reason.UNAUTHENTICATED


def test_keyed_group_a_new_window_replaces_the_current_one():
    log = _keyed()
    log.put(release_group("adm:x", 50_000, key=KEY), 0)
    assert log.put(release_group("adm:x", 101, key=KEY), 100).accepted  # end it soon
    assert log.put(claim("a:1"), 101).effect is Effect.CLAIMED


def test_keyed_and_unkeyed_groups_side_by_side():
    log = _keyed()
    assert log.put(release_group("adm:x", 100, g="h"), 0).accepted  # h has no key
    assert log.put(beat("adm:x", 3, g="h"), 1).effect is Effect.POSITION_SET
    # a tag is ignored where there is no key, whoever made it
    assert log.put(release_group("adm:x", 200, g="h", key=OTHER_KEY), 2).accepted
    assert log.put(beat("adm:x", 4, g="h", key=OTHER_KEY), 3).effect is Effect.POSITION_SET
    # an already-expired ReleaseGroup still ends an unkeyed group's pause
    assert log.put(release_group("adm:x", 0, g="h"), 4).accepted
    assert log.w.paused_until("h") is None


def test_consumers_of_a_keyed_group_need_no_tag():
    log = _keyed()
    assert log.put(claim("a:1"), 0).effect is Effect.CLAIMED
    assert log.put(beat("a:1", 3), 1).effect is Effect.RENEWED
    assert log.put(beat("a:1", 4, key=OTHER_KEY), 2).effect is Effect.RENEWED  # ignored
    assert log.put(claim_msgs("a:1", 9), 3).accepted
    assert log.put(release("a:1", 9), 4).accepted


def test_fenced_check_comes_first_even_for_tagged_records():
    log = _keyed()
    log.put(claim("adm:x"), 0)
    log.put(beat("adm:y", 1), 1)  # restart takeover fences adm:x
    assert log.put(release_group("adm:x", 5000, key=KEY), 2).reason is Reason.FENCED
    assert log.put(release_group("adm:y", 5000, key=KEY), 2).accepted


def test_keyed_verdicts_survive_snapshots_and_keys_are_not_stored():
    log = _keyed()
    log.put(release_group("adm:x", 5000), 0)
    log.put(release_group("adm:x", 5000, key=KEY), 1)
    data = log.w.to_bytes()
    assert KEY not in data
    r = WorldState.from_bytes(data, admin_keys={"g": KEY})
    assert r.to_bytes() == data
    assert r.verdict(0).reason is Reason.UNAUTHENTICATED
    assert r.rejections()[Reason.UNAUTHENTICATED] == 1
    k, v = encode(beat("adm:x", 7))
    assert r.apply(2, 2, k, v).reason is Reason.UNAUTHENTICATED
    # restored without the key, the same record is accepted: keys are configuration
    unkeyed = WorldState.from_bytes(data)
    assert unkeyed.apply(2, 2, k, v).effect is Effect.POSITION_SET


def test_a_members_own_claims_are_found_without_a_claim_object_for_each():
    """What a member's core asks after each replay step and each claim pass: the partitions
    its very instance holds (``held_by``) and those of them it does not track
    (``claims_of_instance``), in (topic, partition) order; another instance's and another
    client's are not among them."""
    log = Log()
    for p in (3, 0, 1):
        assert log.put(claim("a:1", p=p), 0).accepted
    assert log.put(claim("a:2", p=2), 0).accepted
    assert log.put(claim("b:1", p=4), 0).accepted
    w = log.w
    assert w.held_by("g", ("a", "1")) == {("orders", 0), ("orders", 1), ("orders", 3)}
    assert w.held_by("g", ("a", "2")) == {("orders", 2)}
    assert w.held_by("g", ("c", "1")) == set() and w.held_by("other", ("a", "1")) == set()
    mine = w.claims_of_instance("g", ("a", "1"), {("orders", 1)})
    assert [(c.partition, c.client_id, c.instance_id) for c in mine] == [
        (0, "a", "1"),
        (3, "a", "1"),
    ]
    assert [c.partition for c in w.claims_of_instance("g", ("a", "1"))] == [0, 1, 3]
    # the same claims as claims_of, but for the other instance's
    assert [c for c in w.claims_of("g", "a") if c.instance_id == "1"] == w.claims_of_instance(
        "g", ("a", "1")
    )
