"""Pure parts of the admin: key files, times, reset plans and their CSV, Burrow status."""

from __future__ import annotations

import os

import pytest

from logmarshal.admin import AdminError, AdminKeyError, Target, parse_admin_keys, plan_reset
from logmarshal.admin.keys import load_admin_keys
from logmarshal.admin.reset import parse_plan_csv, parse_topic_scope, plan_to_csv
from logmarshal.admin.status import LagSample, Status, evaluate_partition, worst
from logmarshal.admin.times import parse_datetime_ms, parse_duration_ms, parse_span_ms

KEY = bytes(range(32))

# ------------------------------------------------------------------ keys


def test_key_file_formats() -> None:
    text = f"# comment\n\norders\t{KEY.hex()}\nbilling  base64:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n* hex:{KEY.hex()}\n"
    keys = parse_admin_keys(text)
    assert keys.key_for("orders") == KEY
    assert keys.key_for("billing") == KEY
    assert keys.key_for("anything") == KEY
    assert keys.for_groups(["x"]) == {"orders": KEY, "billing": KEY, "x": KEY}
    single = parse_admin_keys(KEY.hex() + "\n")
    assert single.default == KEY and single.for_group("g") == {"g": KEY}
    assert KEY.hex() not in repr(keys)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("g 00112233", "at least 16"),
        ("g zz!!", "not valid base64"),
        (f"g {KEY.hex()}\ng {KEY.hex()}", "second key"),
        (f"a b {KEY.hex()}", "expected 'GROUP KEY'"),
        ("# nothing\n", "no keys"),
        (f"* {KEY.hex()}\n* {KEY.hex()}", "second '*'"),
    ],
)
def test_bad_key_files(text: str, needle: str) -> None:
    with pytest.raises(AdminKeyError, match=needle) as info:
        parse_admin_keys(text)
    assert KEY.hex() not in str(info.value)


def test_world_readable_key_file_is_refused(tmp_path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"g {KEY.hex()}\n")
    os.chmod(path, 0o644)
    with pytest.raises(AdminKeyError, match=r"accessible by others.*chmod 600"):
        load_admin_keys(path)
    os.chmod(path, 0o600)
    assert load_admin_keys(path).key_for("g") == KEY
    with pytest.raises(AdminKeyError, match="cannot open"):
        load_admin_keys(tmp_path / "missing")


# ------------------------------------------------------------------ times


def test_times() -> None:
    assert parse_datetime_ms("2026-11-21T10:00:00.000") == 1795255200000  # naive = UTC
    assert parse_datetime_ms("2026-11-21T11:00:00+01:00") == 1795255200000
    assert parse_datetime_ms("2026-11-21T10:00:00Z") == 1795255200000
    assert parse_duration_ms("P1DT2H3M4.5S") == 86_400_000 + 2 * 3_600_000 + 3 * 60_000 + 4_500
    assert parse_duration_ms("PT1H") == 3_600_000
    assert parse_span_ms("1h30m") == 5_400_000
    assert parse_span_ms("2.5") == 2_500
    assert parse_span_ms("500ms") == 500
    assert parse_span_ms("PT30S") == 30_000
    for bad in ("P", "PT", "1H", "P-1D", "PT1X"):
        with pytest.raises(ValueError, match="malformed duration"):
            parse_duration_ms(bad)
    for bad in ("yesterday", "2026-13-01T00:00:00"):
        with pytest.raises(ValueError, match="malformed date-time"):
            parse_datetime_ms(bad)
    with pytest.raises(ValueError, match="malformed duration"):
        parse_span_ms("soon")
    # an attack on the CLI: these were "year 275817 is out of range" and an int range error
    # of the pause record
    assert parse_span_ms("1000000000") == 10**12
    for bad in ("P99999999D", "99999999999999999999s", "1e20", "1000000000.5"):
        with pytest.raises(ValueError, match="is longer than 1000000000 s"):
            parse_span_ms(bad)
    with pytest.raises(ValueError, match="is longer than"):
        parse_duration_ms("P99999999D")


# ------------------------------------------------------------------ plans

PARTS = [("t", 0), ("t", 1), ("t", 2)]
BOUNDS = {("t", 0): (0, 100), ("t", 1): (10, 20), ("t", 2): (0, 0)}
CURRENT = {("t", 0): 50, ("t", 1): 15, ("t", 2): None}


def new_offsets(target: Target, **kw) -> dict:
    plan = plan_reset("g", PARTS, CURRENT, BOUNDS, target, **kw)
    return {(r.topic, r.partition): r.new for r in plan.rows}


def test_plan_targets_and_clamping() -> None:
    assert new_offsets(Target("earliest")) == {("t", 0): 0, ("t", 1): 10, ("t", 2): 0}
    assert new_offsets(Target("latest")) == {("t", 0): 100, ("t", 1): 20, ("t", 2): 0}
    assert new_offsets(Target("current")) == {("t", 0): 50, ("t", 1): 15, ("t", 2): 0}
    plan = plan_reset("g", PARTS, CURRENT, BOUNDS, Target("offset", 30))
    assert {(r.topic, r.partition): r.new for r in plan.rows} == {
        ("t", 0): 30,
        ("t", 1): 20,
        ("t", 2): 0,
    }
    assert any("after the log end 20; using 20" in w for w in plan.warnings)
    plan = plan_reset("g", PARTS[:2], CURRENT, BOUNDS, Target("shift", -10))
    assert [r.new for r in plan.rows] == [40, 10]
    assert any("before the earliest offset 10" in w for w in plan.warnings)
    with pytest.raises(AdminError, match="cannot shift t/2: the group has no position"):
        plan_reset("g", PARTS, CURRENT, BOUNDS, Target("shift", 1))
    times = {("t", 0): 42, ("t", 1): None, ("t", 2): None}
    plan = plan_reset("g", PARTS, CURRENT, BOUNDS, Target("datetime", 123), time_offsets=times)
    assert [r.new for r in plan.rows] == [42, 20, 0]
    assert any("no record at or after that time" in w for w in plan.warnings)


def test_csv_round_trip_and_kafka_formats() -> None:
    plan = plan_reset("g", PARTS, CURRENT, BOUNDS, Target("offset", 5))
    text = plan_to_csv(plan)
    assert text == "t,0,5\nt,1,10\nt,2,0\n"  # kafka-consumer-groups --export: no header
    rows = parse_plan_csv(text, "g")
    assert new_offsets(Target("file", rows)) == {("t", 0): 5, ("t", 1): 10, ("t", 2): 0}
    assert parse_plan_csv("topic,partition,offset\nt,0,7\n", "g") == {("t", 0): 7}
    assert parse_plan_csv("\ufefft,0,7\r\n", "g") == {("t", 0): 7}  # (Excel's byte order mark)
    assert parse_plan_csv("g,t,0,7\nother,t,1,8\n", "g") == {("t", 0): 7}


@pytest.mark.parametrize(
    "text, needle",
    [
        ("", "no rows"),
        ("t,0\n", "expected topic,partition,offset"),
        ("t,x,1\n", "whole numbers"),
        ("t,0,-3\n", "cannot be negative"),
        ("t,0,1\nt,0,2\n", "appears twice"),
        ("bad topic!,0,1\n", "invalid topic"),
        ("other,t,0,1\n", "no rows for group"),
        ("t,0,1\nt,1,2,3\n", "got 4 columns"),
    ],
)
def test_bad_csv(text: str, needle: str) -> None:
    with pytest.raises(AdminError, match=needle):
        parse_plan_csv(text, "g", "plan.csv")


def test_topic_scope() -> None:
    assert parse_topic_scope("t") == ("t", None)
    assert parse_topic_scope("t:0,2,5") == ("t", (0, 2, 5))
    for bad in ("t:", "t:a", "t:-1", "bad/topic"):
        with pytest.raises(AdminError):
            parse_topic_scope(bad)


# ------------------------------------------------------------------ Burrow status


def samples(*rows: tuple[int, int, int]) -> list[LagSample]:
    return [LagSample(t, p, lag) for t, p, lag in rows]


def test_burrow_rules() -> None:
    moving = samples((0, 10, 5), (100, 20, 3), (200, 30, 1))
    assert evaluate_partition(moving, 1, 250, 1000) is Status.OK
    assert evaluate_partition(moving, 0, 99_999, 1000) is Status.OK  # caught up
    assert evaluate_partition(moving, 1, 1300, 1000) is Status.STOP  # heartbeats stopped
    assert evaluate_partition([], 5, 0, 1000) is Status.STOP  # nobody ever reported
    stalled = samples((0, 10, 5), (100, 10, 6), (200, 10, 7))
    assert evaluate_partition(stalled, 7, 250, 1000) is Status.STALL
    behind = samples((0, 10, 5), (100, 12, 6), (200, 14, 8))
    assert evaluate_partition(behind, 8, 250, 1000) is Status.WARN
    rewound = samples((0, 10, 5), (100, 2, 13), (200, 4, 12))
    assert evaluate_partition(rewound, 12, 250, 1000) is Status.REWIND
    had_zero = samples((0, 10, 0), (100, 10, 3))
    assert evaluate_partition(had_zero, 3, 150, 1000) is Status.OK
    assert worst([Status.OK, Status.STALL, Status.WARN]) is Status.STALL
    assert worst([]) is Status.OK


def test_a_position_past_the_log_end_is_past_end_whatever_came_before() -> None:
    """It was OK (lag 0): a group whose position the log does not reach skips records."""
    moving = samples((0, 10, 5), (100, 20, 3), (200, 30, 1))
    assert evaluate_partition(moving, -1, 250, 1000) is Status.PAST_END
    assert evaluate_partition([], -90, 99_999, 1000) is Status.PAST_END  # silent too
    assert worst([Status.STOP, Status.PAST_END, Status.OK]) is Status.PAST_END
