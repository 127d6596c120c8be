import pytest

from rationalizer import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    ReleaseGroup,
    ReleasingPartition,
)
from rationalizer.messages import MAX_ID_BYTES

IDS = {"client_id": "c", "instance_id": "i", "group_id": "g"}


def test_construct_all_with_default_version():
    assert Heartbeat(**IDS, topic="t", partition=0, last_offset=-1).version == 1
    assert ClaimingPartition(**IDS, topic="t", partition=0).version == 1
    assert ReleasingPartition(**IDS, topic="t", partition=0, last_offset=5).version == 1
    assert ClaimingMessages(**IDS, topic="t", partition=0, proposed_last_offset=5).version == 1
    assert ReleaseGroup(**IDS, msg_expire_time=0).version == 1


def test_frozen_and_keyword_only():
    m = ClaimingPartition(**IDS, topic="t", partition=0)
    with pytest.raises(AttributeError):
        m.partition = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        ClaimingPartition("c", "i", "g", "t", 0)  # type: ignore[misc]


@pytest.mark.parametrize("field", ["client_id", "instance_id", "group_id"])
@pytest.mark.parametrize("bad", ["", None, 5, b"x", "x" * (MAX_ID_BYTES + 1), "\ud800"])
def test_bad_ids(field, bad):
    with pytest.raises(ValueError):
        ClaimingPartition(**{**IDS, field: bad}, topic="t", partition=0)


def test_id_limit_is_in_utf8_bytes_and_slash_is_allowed_in_groups():
    ClaimingPartition(**{**IDS, "group_id": "a/b/c"}, topic="t", partition=0)
    ClaimingPartition(**{**IDS, "client_id": "é" * (MAX_ID_BYTES // 2)}, topic="t", partition=0)
    with pytest.raises(ValueError):
        ClaimingPartition(
            **{**IDS, "client_id": "é" * (MAX_ID_BYTES // 2 + 1)}, topic="t", partition=0
        )


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "a b", "ü", "x" * 250, None, "t\n"])
def test_bad_topics(topic):
    with pytest.raises(ValueError):
        ClaimingPartition(**IDS, topic=topic, partition=0)


@pytest.mark.parametrize("topic", ["a", "A-b_c.d", "x" * 249, "...", "__marshal"])
def test_good_topics(topic):
    ClaimingPartition(**IDS, topic=topic, partition=0)


@pytest.mark.parametrize("partition", [-1, 2**31, True, 1.0, None, "0"])
def test_bad_partitions(partition):
    with pytest.raises(ValueError):
        ClaimingPartition(**IDS, topic="t", partition=partition)


@pytest.mark.parametrize("off", [-2, 2**63, True, 1.5, None])
def test_bad_offsets(off):
    with pytest.raises(ValueError):
        Heartbeat(**IDS, topic="t", partition=0, last_offset=off)
    with pytest.raises(ValueError):
        ReleasingPartition(**IDS, topic="t", partition=0, last_offset=off)
    with pytest.raises(ValueError):
        ClaimingMessages(**IDS, topic="t", partition=0, proposed_last_offset=off)


@pytest.mark.parametrize("e", [-1, 2**63, None, False])
def test_bad_expire_time(e):
    with pytest.raises(ValueError):
        ReleaseGroup(**IDS, msg_expire_time=e)


@pytest.mark.parametrize("v", [0, 2, "1", True])
def test_bad_version(v):
    with pytest.raises(ValueError):
        ClaimingPartition(**IDS, topic="t", partition=0, version=v)
