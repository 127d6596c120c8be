"""The report's charts show ids as written: matplotlib reads ``$...$`` in a label as
mathtext, and a client id (any UTF-8 the protocol takes) such as ``w$\\undefinedmacro{$``
failed the whole report (an attack on the audit, 2026-12-06)."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from logmarshal.audit.report import _timeline


def test_ids_with_dollar_signs_are_drawn_as_written() -> None:
    odd = "w$\\undefinedmacro{$"
    own = [
        {"group": g, "topic": "t", "partition": 0, "client_id": c, "start_ms": 1000 * i,
         "end_ms": 1000 * i + 500, "last_seen_ms": 1000 * i + 400}
        for i, (g, c) in enumerate([("g$1$", odd), ("h", "a$x$")])
    ]  # fmt: skip
    png, note = _timeline(own, [], 5000)
    assert png and note == "all 2 partitions"
