"""The coordination log's one module: reading, capabilities, truncation on the embedded log."""

from __future__ import annotations

import subprocess
import sys

import pytest

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal import _coordlog as coordlog
from logmarshal.cluster import ColumnFetcher, RecordDeleter
from logmarshal.errors import OffsetOutOfRange


class _Plain:
    """A cluster without the optional capabilities (as a wrapper or another library)."""

    def __init__(self, inner: EmbeddedCluster) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        if name in ("fetch_columns", "delete_records"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def _fill(cluster: EmbeddedCluster, topic: str, n: int, batch: int = 7) -> None:
    cluster.create_topic(topic, 2, {"segment.bytes": 2048, "retention.ms": -1})
    done = 0
    while done < n:
        k = min(batch, n - done)
        cluster.produce(
            topic,
            1,
            [NewRecord(value=b"v%d" % (done + i), key=b"k", timestamp=done + i) for i in range(k)],
        )
        done += k


def test_capabilities_are_optional(cluster) -> None:
    assert isinstance(cluster, ColumnFetcher) and isinstance(cluster, RecordDeleter)
    plain = _Plain(cluster)
    assert not isinstance(plain, ColumnFetcher) and not isinstance(plain, RecordDeleter)
    _fill(cluster, "t", 100)
    for start in (0, 3, 50, 99, 100):
        fast = coordlog.fetch_columns(cluster, "t", 1, start)
        slow = coordlog.fetch_columns(plain, "t", 1, start)
        assert fast == slow
        assert fast[0] == list(range(start, 100))[: len(fast[0])]
        assert (fast[0][0] if fast[0] else start) == start
    chunks = list(coordlog.iter_columns(plain, 1, 10, 60, "t"))
    assert [o for c in chunks for o in c[0]] == list(range(10, 60))
    assert coordlog.truncate(plain, 1) is None  # cannot delete: says so, deletes nothing


def test_delete_records_moves_the_log_start_exactly(cluster) -> None:
    """As Kafka's DeleteRecords: the log starts at the offset asked for, even inside a
    segment; the segments wholly below it are removed, the active one never."""
    _fill(cluster, "t", 300)
    data = cluster.data_dir.partition("t", 1)
    bases = [s.base_offset for s in data._segments]
    assert len(bases) > 3
    target = bases[2] + 1  # inside the third segment
    assert cluster.delete_records("t", {1: target}) == {1: target}
    assert data._segments[0].base_offset == bases[2]  # its segment stays
    assert cluster.earliest_offset("t", 1) == target
    assert cluster.fetch("t", 1, target)[0].offset == target
    for gone in (0, bases[2], target - 1):  # below the start: refused, not served
        with pytest.raises(OffsetOutOfRange):
            cluster.fetch("t", 1, gone)
    # timestamps are offsets here: a time before the start finds the start
    assert cluster.offset_for_time("t", 1, 0) == target
    assert cluster.offset_for_time("t", 1, target + 5) == target + 5
    assert cluster.delete_records("t", {1: 3}) == {1: target}  # never moves back
    assert cluster.earliest_offset("t", 1) == target
    # the end: every record goes, the active segment's file stays
    assert cluster.delete_records("t", {1: 300})[1] == 300
    assert [s.base_offset for s in data._segments] == bases[-1:]
    assert cluster.latest_offset("t", 1) == cluster.earliest_offset("t", 1) == 300
    assert cluster.fetch("t", 1, 300) == []
    assert cluster.offset_for_time("t", 1, 0) is None
    with pytest.raises(OffsetOutOfRange):
        cluster.fetch("t", 1, 299)
    with pytest.raises(OffsetOutOfRange):
        cluster.delete_records("t", {1: 301})
    with pytest.raises(ValueError):
        cluster.delete_records("t", {1: -1})
    produced = cluster.produce("t", 1, [NewRecord(value=b"after", timestamp=1)])
    assert produced.base_offset == 300
    assert [m.value for m in cluster.fetch("t", 1, 300)] == [b"after"]


def test_truncation_survives_a_reopen(tmp_path) -> None:
    with EmbeddedCluster(tmp_path / "d", maintenance_interval=0) as c:
        _fill(c, "t", 300)
        bases = [s.base_offset for s in c.data_dir.partition("t", 1)._segments]
        inside = next(b for b in bases if b > 150) + 2
        assert c.delete_records("t", {1: inside})[1] == inside
    with EmbeddedCluster(tmp_path / "d", maintenance_interval=0) as c:
        assert c.earliest_offset("t", 1) == inside  # not the segment's base: kept on disk
        assert c.latest_offset("t", 1) == 300
        with pytest.raises(OffsetOutOfRange):
            c.fetch("t", 1, inside - 1)
        assert c.fetch("t", 1, inside)[0].offset == inside


def test_admin_does_not_import_the_audit() -> None:
    code = (
        "import sys, logmarshal.admin, logmarshal.audit.verify;"
        "import logmarshal.admin.reader as r;"
        "assert 'logmarshal.audit' not in r.__dict__;"
        "from logmarshal import _coordlog as coordlog;"
        "assert r.iter_columns is coordlog.iter_columns;"
        "import logmarshal.audit.verify as v;"
        "assert v.records_from_cluster is coordlog.records_from_cluster"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, logmarshal.admin; print('logmarshal.audit' in sys.modules)",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("version", [2, 4])
def test_group_of_record_reads_membership_of_every_version(version) -> None:
    """Membership records are keyed by the group alone, in version 2 and version 4 layouts;
    the others by ``group/topic/partition`` (``coord dump --group`` filters with it)."""
    from rationalizer import AnnouncingMember, ClaimingPartition, LeavingGroup, encode

    ids = {"client_id": "c", "instance_id": "i", "group_id": "g"}
    announce = AnnouncingMember(
        **ids, topics=(("t", 1),), heartbeat_interval_ms=1000, version=version
    )
    assert coordlog.group_of_record(*encode(announce)) == "g"
    assert coordlog.group_of_record(*encode(LeavingGroup(**ids))) == "g"
    claim = ClaimingPartition(**ids, topic="t", partition=0, heartbeat_interval_ms=1000, version=5)
    assert coordlog.group_of_record(*encode(claim)) == "g"
    assert coordlog.group_of_record(b"g", b"\x01") is None


def test_group_of_record_reads_the_envelope_of_version_6_and_later() -> None:
    """A MemberHeartbeat (version 7) is keyed by the group alone under a heartbeat's type
    byte: the envelope names its group, as it does every record of version 6 and later
    (``coord dump --group g`` kept none of g's MemberHeartbeats before it read it)."""
    from rationalizer import ClaimingPartition, HeartbeatingTask, MemberHeartbeat, encode
    from rationalizer._codec import seal

    ids = {"client_id": "c", "instance_id": "i", "group_id": "g/x"}
    beats = MemberHeartbeat(**ids, heartbeat_interval_ms=1000, entries=(("t", 0, 3, 5),))
    assert coordlog.group_of_record(*encode(beats)) == "g/x"
    task = HeartbeatingTask(
        **ids, topic="t", partition=0, heartbeat_interval_ms=1, positions=(("a", 0),), tenure=3
    )
    assert coordlog.group_of_record(*encode(task)) == "g/x"
    claim = ClaimingPartition(**ids, topic="t", partition=0, heartbeat_interval_ms=1000, version=6)
    assert coordlog.group_of_record(*encode(claim)) == "g/x"
    future = seal(10, 1, "h", b"rules to come")
    assert coordlog.group_of_record(b"h", future) == "h"  # the group it halts
    junk = bytes([7]) + future[1:]  # the check no longer matches
    assert coordlog.group_of_record(b"h", junk) is None


def test_a_damaged_batch_at_the_end_ends_a_read_to_the_end(tmp_path, monkeypatch) -> None:
    """A read up to a log end waits for records below it that have not come
    (``_ranges.read_below``); a damaged batch skipped at the very end is not such a wait:
    the read and the audit export end at once, with the records before it."""
    from logmarshal import _ranges
    from logmarshal.audit.export import export_coordination
    from tests.storage.corruptions import CORRUPTIONS

    monkeypatch.setattr(_ranges, "RANGE_WAIT", 5.0)
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as cluster:
        coordlog.ensure_coordination_topic(cluster, 1)
        cluster.produce(coordlog.COORDINATION_TOPIC, 0, [NewRecord(b"v", key=b"k", timestamp=1)])
        plog = cluster._dir.partition(coordlog.COORDINATION_TOPIC, 0)
        plog.validate_records = False  # store what a validating broker would refuse
        try:
            plog.append(CORRUPTIONS["record length beyond the batch"][0]())
        finally:
            plog.validate_records = True
        end = plog.log_end_offset
        assert end > 1
        skipped = []
        chunks = list(
            coordlog.iter_columns(cluster, 0, 0, end, coordlog.COORDINATION_TOPIC, skipped.append)
        )
        assert [c[0] for c in chunks] == [[0]] and len(skipped) == 1
        pytest.importorskip("pyarrow")
        assert export_coordination(cluster, tmp_path / "export").records == 1
