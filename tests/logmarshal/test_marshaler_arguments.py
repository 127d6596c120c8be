"""A Marshaler's numbers that are no HB or no count are refused at construction, with an
error that names them: inf, nan, a str or a bool raised OverflowError, a bare ValueError or
TypeError from deep inside, or were taken (True as one second): an attack on the API."""

from __future__ import annotations

import threading

import pytest

import logmarshal
from logmarshal.marshaler import Marshaler


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (float("inf"), ValueError),
        (float("nan"), ValueError),
        (0, ValueError),
        (-1.0, ValueError),
        (3601, ValueError),
        ("1", TypeError),
        (True, TypeError),
        (None, TypeError),
    ],
)
def test_a_heartbeat_interval_that_is_no_hb_is_refused(tmp_path, value, error) -> None:
    threads = threading.active_count()
    with (
        logmarshal.connect(data_dir=tmp_path / "d") as cluster,
        pytest.raises(error, match="heartbeat_interval"),
    ):
        Marshaler(cluster, "c", "g", value)
    assert threading.active_count() == threads  # nothing was started


@pytest.mark.parametrize("value", ["8", 2.0, True])
def test_coordination_partitions_must_be_an_int(tmp_path, value) -> None:
    with (
        logmarshal.connect(data_dir=tmp_path / "d") as cluster,
        pytest.raises(TypeError, match="coordination_partitions"),
    ):
        Marshaler(cluster, "c", "g", 1.0, coordination_partitions=value)
