"""DataDir: topics, metadata persistence, names, configs and the single-owner lock."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from storage import (
    DataDir,
    DataDirLocked,
    InvalidConfig,
    InvalidTopicName,
    NewRecord,
    StorageError,
    TimestampType,
    TopicConfig,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
    decode_records,
    encode_batch,
)
from storage._topics_meta import MAX_META_BYTES
from tests.storage.conftest import FakeClock, batch

REPO = Path(__file__).resolve().parents[2]


def test_topic_lifecycle_and_persistence(tmp_path: Path, clock: FakeClock) -> None:
    cfg = TopicConfig(
        timestamp_type=TimestampType.LOG_APPEND_TIME, flush_messages=1, segment_bytes=4096
    )
    with DataDir(tmp_path, clock=clock) as dd:
        info = dd.create_topic("__marshal", 8, cfg)
        assert info.partitions == 8 and info.config == cfg
        dd.create_topic("events", 2)
        assert dd.topics() == ["__marshal", "events"]
        dd.partition("events", 1).append(batch([b"a", b"b"]))
        with pytest.raises(TopicExists) as err:
            dd.create_topic("events")
        assert err.value.topic == "events"
        info = dd.add_partitions("events", 4)
        assert info.partitions == 4
        assert [p.log_end_offset for p in info.partition_info] == [0, 2, 0, 0]
        with pytest.raises(InvalidConfig):
            dd.add_partitions("events", 4)
        with pytest.raises(InvalidConfig):
            dd.add_partitions("events", 2)
        dd.create_topic("gone", 1)
        dd.partition("gone", 0).append(batch([b"x"]))
        dd.delete_topic("gone")
        assert "gone" not in dd.topics()
        with pytest.raises(UnknownTopic):
            dd.describe("gone")
        with pytest.raises(UnknownTopic):
            dd.delete_topic("gone")
    assert not any(p.name.startswith("gone") for p in tmp_path.iterdir())
    with DataDir(tmp_path, clock=clock) as dd:
        assert dd.topics() == ["__marshal", "events"]
        assert dd.describe("__marshal").config == cfg
        info = dd.describe("events")
        assert info.partitions == 4
        p1 = info.partition_info[1]
        assert (p1.partition, p1.log_start_offset, p1.log_end_offset, p1.segments) == (1, 0, 2, 1)
        assert p1.size_bytes > 0
        assert [r.value for r in decode_records(dd.partition("events", 1).read(0).data)] == [
            b"a",
            b"b",
        ]
        # a deleted topic's name can be reused and starts empty
        dd.create_topic("gone", 1)
        assert dd.partition("gone", 0).log_end_offset == 0


def test_partition_errors(datadir: DataDir) -> None:
    datadir.create_topic("t", 2)
    with pytest.raises(UnknownTopic) as err:
        datadir.partition("nope", 0)
    assert err.value.topic == "nope"
    for bad in (-1, 2, 99):
        with pytest.raises(UnknownPartition) as perr:
            datadir.partition("t", bad)
        assert (perr.value.topic, perr.value.partition) == ("t", bad)
    with pytest.raises(InvalidConfig):
        datadir.create_topic("zero", 0)
    with pytest.raises(InvalidConfig):
        datadir.create_topic("cfg", 1, {"segment.bytes": "1"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    # "evil\n": a pattern ending in "$" matched before a final newline (a broker fuzz found
    # the topic created, listed and stored in directory "evil\n-0")
    "name",
    ["", ".", "..", "a" * 250, "has space", "slash/x", "ümlaut", "a:b", "evil\n", "\nx"],
)
def test_invalid_topic_names(datadir: DataDir, name: str) -> None:
    with pytest.raises(InvalidTopicName):
        datadir.create_topic(name)
    assert datadir.topics() == []


def test_valid_names_and_collisions(datadir: DataDir) -> None:
    datadir.create_topic("a" * 249)
    datadir.create_topic("Az09._-")
    datadir.create_topic("my.topic")
    with pytest.raises(InvalidTopicName, match="collides"):
        datadir.create_topic("my_topic")


def test_config_dict_round_trip() -> None:
    cfg = TopicConfig(
        segment_bytes=1000,
        segment_ms=5,
        retention_ms=-1,
        retention_bytes=10,
        flush_messages=1,
        flush_ms=0,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        max_message_bytes=500,
        index_interval_bytes=0,
    )
    d = cfg.to_dict()
    assert d["message.timestamp.type"] == "LogAppendTime"
    assert d["retention.ms"] == "-1"
    assert all(isinstance(v, str) for v in d.values())
    assert TopicConfig.from_dict(d) == cfg
    assert "flush.messages" not in TopicConfig().to_dict()
    assert TopicConfig.from_dict({"segment.bytes": 2048}).segment_bytes == 2048
    for bad in (
        {"nope": "1"},
        {"segment.bytes": "x"},
        {"segment.bytes": "1"},
        {"retention.ms": "-2"},
        {"flush.messages": "0"},
        {"message.timestamp.type": "WallTime"},
    ):
        with pytest.raises(InvalidConfig):
            TopicConfig.from_dict(bad)
    with pytest.raises(InvalidConfig):
        TopicConfig(segment_bytes=True)


def test_same_process_second_open_is_refused(tmp_path: Path) -> None:
    with DataDir(tmp_path):
        with pytest.raises(DataDirLocked) as err:
            DataDir(tmp_path)
        assert str(tmp_path) in str(err.value)
    DataDir(tmp_path).close()  # released on close


def test_an_open_that_fails_writing_its_lock_leaves_it_free(tmp_path: Path, monkeypatch) -> None:
    """A full disk at the lock file's write kept the lock held by this process: every later
    open in it was refused as "locked by another owner" (an attack, 2026-12-06)."""
    import errno

    import storage._datadir as datadir

    def full(*_args) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(datadir.os, "pwrite", full)
        with pytest.raises(OSError, match="No space left") as err:
            DataDir(tmp_path)
    assert err.value.filename == str(tmp_path / ".lock")
    DataDir(tmp_path).close()  # the space is back: it opens


def test_second_process_is_refused_the_lock(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from storage import DataDir, DataDirLocked
        try:
            DataDir({str(tmp_path)!r})
        except DataDirLocked as exc:
            print("LOCKED", exc.path)
            sys.exit(3)
        print("OPENED")
        """
    )
    with DataDir(tmp_path):
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 3, (out, err)
        assert out.strip() == f"LOCKED {tmp_path}"
    # once released, another process may open it
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "OPENED" in proc.stdout, proc.stderr


def test_closed_datadir(tmp_path: Path) -> None:
    dd = DataDir(tmp_path)
    dd.create_topic("t")
    dd.close()
    dd.close()
    with pytest.raises(StorageError):
        dd.create_topic("u")
    with pytest.raises(StorageError):
        dd.partition("t", 0)


def test_flusher_thread_honours_flush_ms(tmp_path: Path, monkeypatch) -> None:
    import os
    import time

    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    with DataDir(tmp_path, flush_interval_s=0.02) as dd:
        dd.create_topic("t", 1, TopicConfig(flush_ms=50))
        dd.partition("t", 0).append(batch([b"x"]))
        calls.clear()
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.02)
        assert calls


def test_datadir_retention_and_flush(tmp_path: Path, clock: FakeClock) -> None:
    with DataDir(tmp_path, clock=clock) as dd:
        dd.create_topic("t", 2, TopicConfig(segment_bytes=200, retention_ms=1000))
        for i in range(10):
            for p in range(2):
                dd.partition("t", p).append(batch([b"v%d" % i], ts=clock()))
        dd.flush()
        clock.advance(2000)
        assert dd.enforce_retention() > 0
        assert all(p.segments == 1 for p in dd.describe("t").partition_info)


def test_a_directory_that_is_not_a_data_directory_keeps_what_is_not_ours(tmp_path, caplog) -> None:
    """``--data-dir`` on a folder of someone's: opening it swept its ``*-delete`` subfolders
    away (an attack on the CLI). It is opened with a warning; only our own files are added."""
    home = tmp_path / "home"
    (home / "backups-to-delete").mkdir(parents=True)
    (home / "backups-to-delete" / "important.txt").write_text("keep me")
    (home / "photos-2019").mkdir()
    (home / "photos-2019" / "a.jpg").write_bytes(b"jpg")
    (home / "t-0.abababababababababababababababab-delete").mkdir()  # shaped as ours, not ours
    (home / "t-0.abababababababababababababababab-delete" / "notes.txt").write_text("mine")
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    with caplog.at_level("WARNING"), DataDir(home) as d:
        assert d.topics() == []
    assert "does not look like a logmarshal data directory" in caplog.text
    after = sorted(p.relative_to(home) for p in home.rglob("*"))
    assert [p for p in before if p not in after] == []


def test_directories_whose_metadata_was_lost_are_one_error_a_topic(tmp_path, caplog) -> None:
    """One ERROR line for each directory made 39 lines of the demo's data directory at every
    open; one a topic, naming its directories and the command that takes them back."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("ev", 12)
        d.create_topic("other", 1)
        for p in range(12):
            d.partition("ev", p).append(encode_batch([NewRecord(b"v", timestamp=1)]))
        d.partition("other", 0).append(encode_batch([NewRecord(b"o", timestamp=1)]))
    (data / "topics.json").unlink()
    with caplog.at_level(logging.ERROR, logger="storage"), DataDir(data):
        pass
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(lines) == 2
    assert "12 partition directory(ies) of topic 'ev'" in lines[0]
    assert "(ev-0, ev-1, ev-2, ev-3, ev-4, ev-5, ev-6, ev-7 and 4 more)" in lines[0]
    assert lines[0].endswith("logmarshal topic adopt ev)")
    assert "topic 'other'" in lines[1] and "(other-0)" in lines[1]


def test_partitions_whose_metadata_was_lost_are_never_wiped(tmp_path) -> None:
    """``topics.json`` lost: the partition directories holding records are left alone, and
    creating the topic again is refused instead of emptying them (before, it wiped 1000
    records: an attack on the CLI). One left empty by an interrupted creation still goes."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("ev", 2)
        d.partition("ev", 0).append(encode_batch([NewRecord(b"v", timestamp=1)] * 5))
    (data / "topics.json").unlink()
    with DataDir(data) as d:
        assert d.topics() == []
        with pytest.raises(StorageError, match="holds records that the metadata does not list"):
            d.create_topic("ev", 2)
        assert d.topics() == []
    assert (data / "ev-0").is_dir() and not (data / "ev-1").exists()  # the empty one went
    assert any(f.stat().st_size for f in (data / "ev-0").glob("*.log"))


def test_a_deleted_topics_leftover_is_removed_and_nothing_else(tmp_path) -> None:
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("t", 1)
    leftover = data / f"t-0.{'ab' * 16}-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x" * 10)
    foreign = data / "x-1.notours-delete"
    foreign.mkdir()
    with DataDir(data) as d:
        assert d.topics() == ["t"]
    assert not leftover.exists() and foreign.exists()


def test_adding_partitions_never_wipes_a_directory_holding_records(tmp_path) -> None:
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("ev", 1)
        stray = data / "ev-1"
        stray.mkdir()
        (stray / "00000000000000000000.log").write_bytes(b"records the metadata lost")
        with pytest.raises(StorageError, match="holds records"):
            d.add_partitions("ev", 3)
        assert d.describe("ev").partitions == 1
    assert (stray / "00000000000000000000.log").read_bytes() == b"records the metadata lost"


def _meta(data: Path, edit) -> None:
    meta = json.loads((data / "topics.json").read_text())
    edit(meta)
    (data / "topics.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda m: m.__setitem__("topics", []), 'no "topics" object'),
        (lambda m: m.__setitem__("topics", None), 'no "topics" object'),
        (lambda m: m["topics"].__setitem__("ev", 5), "the entry is not"),
        (lambda m: m["topics"]["ev"].pop("config"), "the entry is not"),
        (lambda m: m["topics"]["ev"].__setitem__("config", None), "the entry is not"),
        (lambda m: m["topics"]["ev"].__setitem__("partitions", 0), "got 0"),
        (lambda m: m["topics"]["ev"].__setitem__("partitions", -2), "got -2"),
        (lambda m: m["topics"]["ev"].__setitem__("partitions", 1.7), "got 1.7"),
        (lambda m: m["topics"]["ev"].__setitem__("partitions", True), "got True"),
        (lambda m: m["topics"]["ev"].__setitem__("partitions", 10**12), "got 1000000000000"),
        (lambda m: m["topics"].__setitem__("../escaped", m["topics"]["ev"]), "'../escaped'"),
        (lambda m: m["topics"].__setitem__("a/b", m["topics"]["ev"]), "'a/b'"),
        (lambda m: m.__setitem__("version", 99), "format version 99"),
        (lambda m: m.__setitem__("version", "1"), "format version '1'"),
    ],
)
def test_a_damaged_or_hand_edited_topics_json_is_refused_whole(tmp_path, damage, says) -> None:
    """An attack on the CLI: each of these was a traceback (AttributeError, TypeError,
    KeyError), or opened what it named: ``../escaped`` made a partition directory outside
    the data directory, a count of 0 or -2 hid a topic's records, 10**12 would make that
    many directories. Each is one StorageError naming the file and the topic, and nothing
    is created or removed."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("ev", 2)
        d.partition("ev", 1).append(encode_batch([NewRecord(b"v", timestamp=1)] * 3))
    _meta(data, damage)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(StorageError, match=r"topics\.json") as err:
        DataDir(data)
    assert says in str(err.value), str(err.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert not (tmp_path / "escaped-0").exists()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"topics": {"ev": {"partitions": Infinity, "config": {}}}}', "Infinity is not"),
        ('{"topics": {"ev": {"partitions": NaN, "config": {}}}}', "NaN is not"),
        ('{"topics": {"ev": {"partitions": 1e400, "config": {}}}}', "beyond a float's range"),
        ("[" * 100_000 + "]" * 100_000, "nested too deep"),
        ("", "is unreadable"),
    ],
)
def test_topics_json_that_python_reads_oddly_is_refused(tmp_path, text, says) -> None:
    """``Infinity`` was an OverflowError traceback, deep nesting a RecursionError one."""
    data = tmp_path / "data"
    DataDir(data).close()
    (data / "topics.json").write_text(text)
    with pytest.raises(StorageError, match=says):
        DataDir(data)


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "huge"])
def test_a_topics_json_that_is_no_regular_file_is_refused_at_once(tmp_path, kind) -> None:
    """``topics.json`` linked to /dev/zero hung ``topic list`` for good (read to the end of
    an endless file); a FIFO would wait for a writer, a huge file fill memory."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("ev", 1)
    meta = data / "topics.json"
    meta.unlink()
    if kind == "dev-zero":
        meta.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(meta)
    else:
        with open(meta, "wb") as f:
            f.truncate(MAX_META_BYTES + 1)  # sparse: no disk used
    says = "more than" if kind == "huge" else "is not a regular file"
    with pytest.raises(StorageError, match=says):
        DataDir(data)


@pytest.mark.parametrize("target", ["dev-zero", "fifo"])
def test_a_segment_that_is_no_regular_file_is_refused(tmp_path, target) -> None:
    """A segment replaced by a link to /dev/zero opened as an empty log, and closing it
    logged an fsync traceback; the other partition is untouched."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("ev", 2)
        for p in (0, 1):
            d.partition("ev", p).append(encode_batch([NewRecord(b"v", timestamp=1)] * 3))
    segment = data / "ev-0" / "00000000000000000000.log"
    segment.unlink()
    if target == "dev-zero":
        segment.symlink_to("/dev/zero")
    else:
        os.mkfifo(segment)
    with pytest.raises(StorageError, match=r"ev-0/00000000000000000000.log is not a regular file"):
        DataDir(data)
    assert (data / "ev-1" / "00000000000000000000.log").stat().st_size > 0


@pytest.mark.parametrize(
    "name", ["log-start-offset.json", "cleaner-checkpoint.json", "00000000000000000000.index"]
)
def test_a_checkpoint_or_index_linked_to_dev_zero_is_set_aside(tmp_path, name) -> None:
    """These hung every command that opened the partition (read to the end of /dev/zero).
    Each is what it is when damaged: a warning, and the partition reads all its records."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("ev", 1)
        d.partition("ev", 0).append(encode_batch([NewRecord(b"v", timestamp=1)] * 3))
    path = data / "ev-0" / name
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")
    with DataDir(data) as d:
        log = d.partition("ev", 0)
        assert [r.offset for r in decode_records(log.read(0).data)] == [0, 1, 2]


def test_a_topic_whose_metadata_was_lost_is_adopted_with_its_records(tmp_path) -> None:
    """``topics.json`` lost: the directories holding records were kept (the test above), but
    nothing could read them again. ``adopt_topic`` lists the topic again, every record
    where it was; the empty partitions the open removed are made again up to the count
    given, and the configs are the ones given."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("ev", 4)
        d.partition("ev", 0).append(encode_batch([NewRecord(b"a", timestamp=1)] * 3))
        d.partition("ev", 2).append(encode_batch([NewRecord(b"c", timestamp=1)] * 2))
    (data / "topics.json").unlink()
    config = TopicConfig.from_dict({"retention.ms": 1_000_000})
    with DataDir(data) as d:
        assert d.topics() == [] and not (data / "ev-1").exists()
        with pytest.raises(StorageError, match="no partition directory of 'nope'"):
            d.adopt_topic("nope")
        with pytest.raises(InvalidTopicName):
            d.adopt_topic("../ev")
        info = d.adopt_topic("ev", config, partitions=4)
        assert info.partitions == 4
        with pytest.raises(TopicExists):
            d.adopt_topic("ev")
    with DataDir(data) as d:  # in the metadata again, durably
        assert d.topics() == ["ev"] and d.describe("ev").config == config
        got = [len(decode_records(d.partition("ev", p).read(0).data)) for p in range(4)]
        assert got == [3, 0, 2, 0]


def test_adopting_counts_up_to_the_highest_partition_found(tmp_path) -> None:
    """Without a count the topic ends at its highest numbered directory; a directory with
    files that are not a partition's is refused, and nothing is listed."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("ev", 3)
        d.partition("ev", 1).append(encode_batch([NewRecord(b"b", timestamp=1)]))
        d.create_topic("other", 1)
        d.partition("other", 0).append(encode_batch([NewRecord(b"o", timestamp=1)]))
    (data / "topics.json").unlink()
    (data / "other-0" / "mine.txt").write_text("not a partition's")
    with DataDir(data) as d:
        assert d.adopt_topic("ev").partitions == 2
        with pytest.raises(StorageError, match="files that are not a partition's"):
            d.adopt_topic("other")
        assert d.topics() == ["ev"]
    assert (data / "other-0" / "mine.txt").exists()


def test_adopting_a_name_that_clashes_with_a_listed_topic_is_refused(tmp_path) -> None:
    """As ``create_topic``: Kafka refuses topics differing only by '.' and '_' (their metric
    names collide), and a directory ``a.b-0`` beside a listed ``a_b`` is not adopted."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("a.b", 1)
        d.partition("a.b", 0).append(encode_batch([NewRecord(b"v", timestamp=1)]))
    (data / "topics.json").unlink()
    with DataDir(data) as d:
        d.create_topic("a_b", 1)
        with pytest.raises(InvalidTopicName, match="collides with existing topic 'a_b'"):
            d.adopt_topic("a.b")
        assert d.topics() == ["a_b"]
    assert (data / "a.b-0").is_dir()


def test_an_unreadable_topics_json_says_how_to_go_on(tmp_path) -> None:
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("ev", 1)
    (data / "topics.json").write_text("{")
    with pytest.raises(StorageError, match=r"move it aside.*logmarshal topic adopt NAME"):
        DataDir(data)


def test_an_index_replaced_by_a_directory_is_named_as_the_problem(tmp_path) -> None:
    """The rebuild's error named its temporary file ("Is a directory: ….index.tmp"), which
    it left behind; it names the index now, and the temporary file is gone."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("ev", 1)
        d.partition("ev", 0).append(encode_batch([NewRecord(b"v", timestamp=1)] * 3))
    index = data / "ev-0" / "00000000000000000000.index"
    index.unlink(missing_ok=True)  # (written once an entry is due)
    index.mkdir()
    with pytest.raises(IsADirectoryError, match="move it away") as err, DataDir(data) as d:
        d.partition("ev", 0).read(0)
    assert err.value.filename == str(index)
    assert not (data / "ev-0" / "00000000000000000000.index.tmp").exists()


def _with_records(d: DataDir, name: str, partitions: int) -> None:
    d.create_topic(name, partitions)
    for p in range(partitions):
        d.partition(name, p).append(batch([b"old"]))


def test_a_topic_whose_name_is_near_the_limit_is_deleted_whole(tmp_path, caplog) -> None:
    """A 249-character topic's partitions were renamed to ``NAME-P.UUID-delete`` before
    removal, longer than a file name may be: the delete failed half way (over the network
    the broker dropped the client), its records stayed, and the name could not be made
    again. An attack on the broker, 2026-12-06."""
    name = "t" * 249
    data = tmp_path / "data"
    with DataDir(data) as d:
        _with_records(d, name, 2)
        d.delete_topic(name)
        assert d.topics() == []
        assert [e.name for e in data.iterdir() if e.is_dir()] == []
        d.create_topic(name, 2)
        assert d.describe(name).partitions == 2


def test_a_delete_a_crash_cut_short_is_finished_at_the_next_open(tmp_path, caplog) -> None:
    """Killed between forgetting a topic and removing its directories, a broker kept about
    half of them, records and all, for good: the next open called them a topic whose
    metadata was lost (an ERROR naming ``topic adopt``, which would bring the deleted
    records back), and the name could not be made again. An attack on the broker,
    2026-12-06."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        _with_records(d, "big", 4)
        _with_records(d, "kept", 1)
        d._finish_delete = lambda name: None  # (the crash: after the metadata, before the rest)
        d.delete_topic("big")
    meta = json.loads((data / "topics.json").read_text())
    assert meta["deleting"] == {"big": 4} and list(meta["topics"]) == ["kept"]
    assert (data / "big-3").exists()
    with caplog.at_level(logging.WARNING, logger="storage"), DataDir(data) as d:
        assert d.topics() == ["kept"] and not (data / "big-0").exists()
        meta = json.loads((data / "topics.json").read_text())
        # (the open that finished the delete saved topics.json before it had loaded the
        # topics, and wrote it without them: a crash then lost every topic's metadata)
        assert "deleting" not in meta and list(meta["topics"]) == ["kept"]
        d.create_topic("big", 2)
        assert d.partition("big", 0).log_end_offset == 0
        assert d.partition("kept", 0).log_end_offset == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"min.compaction.lag.ms": "100000", "max.compaction.lag.ms": "1"}, "conflicting"),
        ({"min.insync.replicas": "abc"}, "must be an integer"),
        ({"min.insync.replicas": "0"}, "at least 1"),
        ({"unclean.leader.election.enable": "maybe"}, "true or false"),
    ],
)
def test_settings_kafka_refuses_are_refused_at_create_and_alter(tmp_path, settings, says):
    """Each was taken, stored and described back (an attack on the broker, 2026-12-06)."""
    with DataDir(tmp_path / "data") as d:
        with pytest.raises(InvalidConfig, match=says):
            d.create_topic("t", 1, TopicConfig.from_dict(settings))
        d.create_topic("t", 1)
        with pytest.raises(InvalidConfig, match=says):
            d.alter_config("t", TopicConfig.from_dict(settings))
    with pytest.raises(InvalidConfig, match="must be an integer"):
        TopicConfig.from_dict({"retention.ms": "1_000"})  # (Java's parseLong refuses it)
    assert TopicConfig.from_dict({"retention.ms": " 5 "}).retention_ms == 5  # (Kafka trims)


def test_what_a_metadata_answer_reads_does_not_wait_for_a_topic_change(tmp_path) -> None:
    """topics(), partition_count() and unwritable() took the data directory's lock, held by
    a create or delete of thousands of partitions for its whole length: a Metadata request
    then stalled the broker's loop, and every client with it (1.24 s at 4,096 partitions).
    They read the view the last change published. An attack on the broker, 2026-12-06."""
    import threading

    with DataDir(tmp_path / "data") as d:
        d.create_topic("t", 3)
        held, release = threading.Event(), threading.Event()

        def long_change() -> None:
            with d._lock:  # (what create_topic and delete_topic hold throughout)
                held.set()
                release.wait(10)

        worker = threading.Thread(target=long_change)
        worker.start()
        try:
            assert held.wait(5)
            answers: list = []
            reader = threading.Thread(
                target=lambda: answers.append(
                    (d.topics(), d.partition_count("t"), d.unwritable("t"))
                )
            )
            reader.start()
            reader.join(2)
            assert answers == [(["t"], 3, ())]
            with pytest.raises(UnknownTopic):
                d.partition_count("nope")
        finally:
            release.set()
            worker.join()
        d.delete_topic("t")
        assert d.topics() == []
        with pytest.raises(UnknownTopic):
            d.partition_count("t")
