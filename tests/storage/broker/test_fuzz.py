"""Mutated frames of every served API never crash the broker or log an unexpected
error; it keeps serving. Bounded and seeded here; ``python3 -m tests.storage.broker.fuzz`` runs longer."""

from __future__ import annotations

from storage.broker.wire import SUPPORTED
from tests.storage.broker.fuzz import captured_frames, run_fuzz, seed_frames


def test_seed_frames_cover_every_served_api() -> None:
    keys = {int.from_bytes(frame[4:6], "big") for frame in seed_frames()}
    assert keys == set(SUPPORTED)
    captured = {int.from_bytes(frame[4:6], "big") for frame in captured_frames()}
    assert {0, 1, 2, 3, 18, 19, 20, 32, 37, 44} <= captured  # real clients' frames are seeds


def test_fuzz_mutated_frames_no_unexpected_errors(tmp_path) -> None:
    report = run_fuzz(tmp_path / "data", iterations=1500, seed=15, wait=0.05)
    assert report.unexpected == []
    assert report.answered > 100 and report.closed > 100  # both paths were exercised
