import pytest

from rationalizer import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    ReleaseGroup,
    ReleasingPartition,
)
from rationalizer._messages import MAX_HEARTBEAT_INTERVAL_MS, MAX_ID_BYTES

IDS = {"client_id": "c", "instance_id": "i", "group_id": "g"}
HB = {"heartbeat_interval_ms": 1000}


def test_construct_all_with_default_version():
    hb = Heartbeat(**IDS, topic="t", partition=0, last_offset=-1, **HB)
    assert hb.version == 1 and hb.auth_tag is None
    assert ClaimingPartition(**IDS, topic="t", partition=0, **HB).version == 1
    assert ReleasingPartition(**IDS, topic="t", partition=0, last_offset=5).version == 1
    assert ClaimingMessages(**IDS, topic="t", partition=0, proposed_last_offset=5).version == 1
    assert ReleaseGroup(**IDS, msg_expire_time=0).version == 1
    assert ReleaseGroup(**IDS, msg_expire_time=0).auth_tag is None


def test_frozen_and_keyword_only():
    m = ClaimingPartition(**IDS, topic="t", partition=0, **HB)
    with pytest.raises(AttributeError):
        m.partition = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        ClaimingPartition("c", "i", "g", "t", 0, 1000)  # type: ignore[misc]


@pytest.mark.parametrize("field", ["client_id", "instance_id", "group_id"])
@pytest.mark.parametrize("bad", ["", None, 5, b"x", "x" * (MAX_ID_BYTES + 1), "\ud800"])
def test_bad_ids(field, bad):
    with pytest.raises(ValueError):
        ClaimingPartition(**{**IDS, field: bad}, topic="t", partition=0, **HB)


def test_id_limit_is_in_utf8_bytes_and_slash_is_allowed_in_groups():
    ClaimingPartition(**{**IDS, "group_id": "a/b/c"}, topic="t", partition=0, **HB)
    ClaimingPartition(
        **{**IDS, "client_id": "é" * (MAX_ID_BYTES // 2)}, topic="t", partition=0, **HB
    )
    with pytest.raises(ValueError):
        ClaimingPartition(
            **{**IDS, "client_id": "é" * (MAX_ID_BYTES // 2 + 1)}, topic="t", partition=0, **HB
        )


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "a b", "ü", "x" * 250, None, "t\n"])
def test_bad_topics(topic):
    with pytest.raises(ValueError):
        ClaimingPartition(**IDS, topic=topic, partition=0, **HB)


@pytest.mark.parametrize("topic", ["a", "A-b_c.d", "x" * 249, "...", "__marshal"])
def test_good_topics(topic):
    ClaimingPartition(**IDS, topic=topic, partition=0, **HB)


@pytest.mark.parametrize("partition", [-1, 2**31, True, 1.0, None, "0"])
def test_bad_partitions(partition):
    with pytest.raises(ValueError):
        ClaimingPartition(**IDS, topic="t", partition=partition, **HB)


@pytest.mark.parametrize("off", [-2, 2**63, True, 1.5, None])
def test_bad_offsets(off):
    with pytest.raises(ValueError):
        Heartbeat(**IDS, topic="t", partition=0, last_offset=off, **HB)
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
        ClaimingPartition(**IDS, topic="t", partition=0, version=v, **HB)


@pytest.mark.parametrize("hb", [0, -1, MAX_HEARTBEAT_INTERVAL_MS + 1, 10**12, True, 1.0, None, "5"])
def test_bad_heartbeat_intervals(hb):
    with pytest.raises(ValueError):
        ClaimingPartition(**IDS, topic="t", partition=0, heartbeat_interval_ms=hb)
    with pytest.raises(ValueError):
        Heartbeat(**IDS, topic="t", partition=0, last_offset=0, heartbeat_interval_ms=hb)


def test_heartbeat_interval_bounds_and_required():
    assert MAX_HEARTBEAT_INTERVAL_MS == 3_600_000  # one hour
    for hb in (1, MAX_HEARTBEAT_INTERVAL_MS):
        ClaimingPartition(**IDS, topic="t", partition=0, heartbeat_interval_ms=hb)
    with pytest.raises(TypeError):
        ClaimingPartition(**IDS, topic="t", partition=0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Heartbeat(**IDS, topic="t", partition=0, last_offset=0)  # type: ignore[call-arg]


@pytest.mark.parametrize("tag", [b"", b"x" * 31, b"x" * 33, bytearray(32), "x" * 32, 5])
def test_bad_auth_tags(tag):
    with pytest.raises(ValueError):
        ReleaseGroup(**IDS, msg_expire_time=0, auth_tag=tag)
    with pytest.raises(ValueError):
        Heartbeat(**IDS, topic="t", partition=0, last_offset=0, auth_tag=tag, **HB)


def test_only_heartbeat_and_release_group_have_a_tag():
    assert ReleaseGroup(**IDS, msg_expire_time=0, auth_tag=bytes(32)).auth_tag == bytes(32)
    with pytest.raises(TypeError):
        ClaimingPartition(**IDS, topic="t", partition=0, auth_tag=bytes(32), **HB)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ReleasingPartition(**IDS, topic="t", partition=0, last_offset=0, auth_tag=bytes(32))  # type: ignore[call-arg]


def test_every_message_type_has_its_snake_case_name():
    """One table names them for the CLI's dump and the audit: every message class, named
    after itself (``ClaimingMessages`` -> ``claiming_messages``)."""
    import re

    from rationalizer import MESSAGE_NAMES, Message

    assert set(MESSAGE_NAMES) == set(Message.__args__)
    for cls, name in MESSAGE_NAMES.items():
        assert name == re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
