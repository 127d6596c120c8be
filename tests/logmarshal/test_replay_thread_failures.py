"""The replay of ``__marshal`` does not die silently (a helper's attack, 2026-12-06):

- the records this process wrote (``Tail.written``, added to by the writer thread's
  ``mark_written``) were scanned by the replay thread without the partition's lock, and a
  dict that changed size during the scan raised RuntimeError in it;
- nothing caught a failure of the replay thread: it stopped with nothing logged and no
  error kept, and every wait on its partitions ran out its timeout."""

from __future__ import annotations

import logging
import time

from logmarshal import EmbeddedCluster
from logmarshal._coordlog import COORDINATION_TOPIC, coordination_topic_settings
from logmarshal._tailer import Tailer
from storage import NewRecord


def _tailer(cluster: EmbeddedCluster) -> Tailer:
    return Tailer(
        cluster,
        1,
        admin_keys=None,
        applied=lambda cp, through, verdicts: None,
        now_ms=lambda: int(time.time() * 1000),
        thread_name="replay",
        fetch_wait=0.05,
        max_partition_fetch_bytes=1 << 20,
        snapshot_records=None,
        snapshot_ms=None,
        truncate=False,
        restore=False,
        announce_ttl_ms=None,
    )


def _write(cluster: EmbeddedCluster, values: list[bytes]) -> list[int]:
    now = int(time.time() * 1000)
    records = [NewRecord(v, key=b"k", timestamp=now) for v in values]
    return list(cluster.produce(COORDINATION_TOPIC, 0, records).offsets)


def test_our_writes_are_checked_under_the_partitions_lock(tmp_path, monkeypatch) -> None:
    held: list[bool] = []
    real = Tailer._written_lost

    def noting(tail, offset, got):
        held.append(tail.cond._is_owned())  # (the writer's mark_written takes it to add)
        return real(tail, offset, got)

    monkeypatch.setattr(Tailer, "_written_lost", staticmethod(noting))
    with EmbeddedCluster(tmp_path) as cluster:
        cluster.create_topic(COORDINATION_TOPIC, 1, coordination_topic_settings())
        tailer = _tailer(cluster)
        tailer.start()
        try:
            assert tailer.wait_applied(0, -1, 10)
            offsets = _write(cluster, [b"ours-0", b"ours-1"])
            tailer.mark_written(0, offsets, [(b"k", b"ours-0"), (b"k", b"ours-1")], sent_at=0)
            assert tailer.wait_applied(0, offsets[-1], 10)
        finally:
            tailer.stop(5)
    assert held and all(held), held


def test_a_replay_thread_that_fails_says_so_and_ends_the_waits(tmp_path, caplog) -> None:
    with EmbeddedCluster(tmp_path) as cluster:
        cluster.create_topic(COORDINATION_TOPIC, 1, coordination_topic_settings())
        tailer = _tailer(cluster)
        tailer.start()
        try:
            assert tailer.wait_applied(0, -1, 10)

            def broken(*args, **kwargs):
                raise RuntimeError("dictionary changed size during iteration")

            tailer._advance = broken  # (a bug in the replay's own code, made here)
            offsets = _write(cluster, [b"theirs"])
            with caplog.at_level(logging.ERROR, logger="logmarshal._tailer"):
                assert not tailer.wait_applied(0, offsets[-1], 30)
            # the wait ended on the error kept (before: none, and the wait ran out)
            assert isinstance(tailer._tails[0].error, RuntimeError)
            assert any("replay of __marshal stopped" in r.getMessage() for r in caplog.records)
        finally:
            tailer.stop(5)
