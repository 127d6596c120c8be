"""A Marshaler's numbers that are no HB or no count are refused at construction, with an
error that names them: inf, nan, a str or a bool raised OverflowError, a bare ValueError or
TypeError from deep inside, or were taken (True as one second): an attack on the API."""

from __future__ import annotations

import threading
import time

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


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("fetch_wait", float("nan")),
        ("fetch_wait", float("inf")),
        ("fetch_linger", float("inf")),
        ("fetch_linger", float("nan")),
        ("announce_ttl", float("nan")),
        ("snapshot_interval", float("inf")),
        ("metrics", True),
    ],
)
def test_settings_that_are_no_seconds_or_no_metrics_are_refused(tmp_path, setting, value):
    """nan and inf passed a check of the sign alone: with fetch_wait the replay never
    advanced, with fetch_linger it stopped for good at its first chunk; announce_ttl and
    snapshot_interval failed with a bare "cannot convert float NaN to integer". A
    ``metrics`` of the wrong type failed after the replay thread started, which ran on. An
    attack on the entry points, 2026-12-06."""
    with logmarshal.connect(data_dir=tmp_path / "d") as cluster:
        threads = threading.active_count()
        with pytest.raises((TypeError, ValueError), match=setting):
            Marshaler(cluster, "c", "g", 1.0, **{setting: value})
        assert threading.active_count() == threads  # nothing was started


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("clock", time.time),
        ("truncate", "no"),
        ("restore_snapshots", 0),
        ("snapshot_records", 2.5),
        ("snapshot_records", True),
        ("snapshot_records", 0),
        ("rng", 5),
        ("admin_keys", [("g", b"k" * 16)]),
    ],
)
def test_settings_of_the_wrong_type_are_refused_before_the_replay_starts(
    tmp_path, setting, value
) -> None:
    """``clock=time.time`` was taken and failed in every replay thread (one traceback a
    coordination partition, the Marshaler returned all the same); ``truncate="no"`` read as
    true and truncated; ``snapshot_records=2.5`` published at no record; ``rng=5`` failed
    with an AttributeError. Found on going through what the last attack left, 2026-12-06."""
    with logmarshal.connect(data_dir=tmp_path / "d") as cluster:
        threads = threading.active_count()
        with pytest.raises((TypeError, ValueError), match=setting):
            Marshaler(cluster, "c", "g", 1.0, **{setting: value})
        assert threading.active_count() == threads  # nothing was started


def test_connect_refuses_what_it_would_have_ignored(tmp_path, monkeypatch) -> None:
    """``client_config`` without ``bootstrap`` opened the embedded ./data, ``data_dir=""``
    the working directory, and a ``bootstrap.servers`` in ``client_config`` replaced
    ``bootstrap`` (another cluster, under the given one's name). An attack, 2026-12-06."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="client_config is for a cluster at bootstrap"):
        logmarshal.connect(client_config={"security.protocol": "SSL"})
    with pytest.raises(ValueError, match="data_dir is empty"):
        logmarshal.connect(data_dir="")
    with pytest.raises(ValueError, match="give them as bootstrap"):
        logmarshal.connect(
            bootstrap="127.0.0.1:1", client_config={"bootstrap.servers": "127.0.0.1:2"}
        )
    assert list(tmp_path.iterdir()) == []  # (nothing opened, nothing made)
