"""sign / verify and admin-key configuration (PROTOCOL.md, "Authenticated admin")."""

import hashlib
import hmac

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rationalizer import (
    MIN_KEY_BYTES,
    ClaimingPartition,
    Heartbeat,
    ReleaseGroup,
    WorldState,
    encode,
    sign,
    verify,
)

from .helpers import KEY, OTHER_KEY, beat, release_group
from .strategies import ids, offsets


def test_sign_returns_a_tagged_copy_and_verify_accepts_it():
    msg = release_group("adm:x", 5000)
    signed = sign(msg, KEY)
    assert msg.auth_tag is None  # frozen, untouched
    assert attrs.evolve(signed, auth_tag=None) == msg
    assert signed.auth_tag == hmac.new(KEY, encode(msg)[1], hashlib.sha256).digest()
    assert verify(signed, KEY)
    assert not verify(signed, OTHER_KEY)
    assert not verify(msg, KEY)  # untagged


def test_resigning_replaces_the_tag():
    signed = sign(beat("adm:x", 5), OTHER_KEY)
    assert verify(sign(signed, KEY), KEY) and not verify(sign(signed, KEY), OTHER_KEY)


def test_tag_is_bound_to_every_field():
    signed = sign(beat("adm:x", 5, p=1), KEY)
    for change in (
        {"last_offset": 6},
        {"partition": 2},
        {"topic": "other"},
        {"group_id": "h"},
        {"client_id": "adm2"},
        {"instance_id": "y"},
        {"heartbeat_interval_ms": 999},
    ):
        assert not verify(attrs.evolve(signed, **change), KEY), change
    rg = sign(release_group("adm:x", 5000), KEY)
    assert not verify(attrs.evolve(rg, msg_expire_time=5001), KEY)
    assert not verify(attrs.evolve(rg, auth_tag=bytes(32)), KEY)


def test_a_heartbeat_tag_does_not_fit_a_release_group():
    hb = sign(beat("adm:x", 5), KEY)
    rg = ReleaseGroup(client_id="adm", instance_id="x", group_id="g", msg_expire_time=5)
    assert not verify(attrs.evolve(rg, auth_tag=hb.auth_tag), KEY)


def test_only_taggable_messages_and_real_keys():
    cp = ClaimingPartition(
        client_id="a", instance_id="1", group_id="g", topic="t", partition=0,
        heartbeat_interval_ms=5,
    )  # fmt: skip
    with pytest.raises(TypeError):
        sign(cp, KEY)  # type: ignore[type-var]
    with pytest.raises(TypeError):
        verify(cp, KEY)  # type: ignore[arg-type]
    for bad in (b"", b"k" * (MIN_KEY_BYTES - 1), "k" * 32, bytearray(32), None):
        with pytest.raises(ValueError):
            sign(release_group("adm:x", 5), bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "keys",
    [
        {"g": b"short"},
        {"g": "a text key of more than 16 chars"},
        {"": KEY},
        {5: KEY},
        [("g", KEY)],
        "g",
    ],
)
def test_world_rejects_bad_admin_keys(keys):
    with pytest.raises(ValueError) as info:
        WorldState(admin_keys=keys)
    assert "short" not in str(info.value)  # a key is never echoed
    with pytest.raises(ValueError):
        WorldState.from_bytes(WorldState().to_bytes(), admin_keys=keys)


def test_world_reports_keyed_groups():
    w = WorldState(admin_keys={"g": KEY})
    assert w.has_admin_key("g") and not w.has_admin_key("h")
    assert not WorldState().has_admin_key("g")


@given(
    st.builds(
        Heartbeat,
        client_id=ids,
        instance_id=ids,
        group_id=ids,
        topic=st.just("t"),
        partition=st.integers(0, 9),
        last_offset=offsets,
        heartbeat_interval_ms=st.integers(1, 3_600_000),
    ),
    st.binary(min_size=MIN_KEY_BYTES, max_size=64),
)
def test_sign_verify_round_trip(msg, key):
    signed = sign(msg, key)
    assert verify(signed, key)
    assert not verify(signed, key + b"!")
