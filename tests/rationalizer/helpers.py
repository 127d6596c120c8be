"""Small builders shared by the rationalizer tests."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from rationalizer import (
    ClaimingMessages,
    ClaimingPartition,
    DecodeError,
    Heartbeat,
    Reason,
    ReleaseGroup,
    ReleasingPartition,
    Verdict,
    WorldState,
    decode,
    encode,
    sign,
)

HB = 1000
G = "g"
T = "orders"
KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))


def ids(who: str) -> dict[str, str]:
    """``"c1:i1"`` -> client c1, instance i1."""
    client, instance = who.split(":")
    return {"client_id": client, "instance_id": instance}


def claim(
    who: str, p: int = 0, g: str = G, t: str = T, hb: int = HB, version: int = 1
) -> ClaimingPartition:
    return ClaimingPartition(
        **ids(who), group_id=g, topic=t, partition=p, heartbeat_interval_ms=hb, version=version
    )


def beat(
    who: str,
    last: int,
    p: int = 0,
    g: str = G,
    t: str = T,
    hb: int = HB,
    key: bytes | None = None,
) -> Heartbeat:
    msg = Heartbeat(
        **ids(who), group_id=g, topic=t, partition=p, last_offset=last, heartbeat_interval_ms=hb
    )
    return msg if key is None else sign(msg, key)


def release(who: str, last: int, p: int = 0, g: str = G, t: str = T) -> ReleasingPartition:
    return ReleasingPartition(**ids(who), group_id=g, topic=t, partition=p, last_offset=last)


def claim_msgs(
    who: str, through: int, p: int = 0, g: str = G, t: str = T, first: int | None = None
) -> ClaimingMessages:
    """Version 1, or version 4 reserving ``first..through`` when ``first`` is given."""
    return ClaimingMessages(
        **ids(who),
        group_id=g,
        topic=t,
        partition=p,
        proposed_last_offset=through,
        first_offset=first,
    )


def release_group(who: str, expires: int, g: str = G, key: bytes | None = None) -> ReleaseGroup:
    msg = ReleaseGroup(**ids(who), group_id=g, msg_expire_time=expires)
    return msg if key is None else sign(msg, key)


class Log:
    """A coordination partition being written and replayed in one go."""

    def __init__(self, admin_keys: Mapping[str, bytes] | None = None) -> None:
        self.w = WorldState(admin_keys=admin_keys)
        self.offset = 0
        self.records: list[tuple[int, int, bytes | None, bytes | None]] = []

    def put(self, msg: object, t: int) -> Verdict:
        key, value = encode(msg)  # type: ignore[arg-type]
        return self.raw(key, value, t)

    def raw(self, key: bytes | None, value: bytes | None, t: int) -> Verdict:
        rec = (self.offset, t, key, value)
        self.records.append(rec)
        self.offset += 1
        v = self.w.apply(*rec)
        assert v is not None
        return v


def assert_every_byte_is_under_the_check(key: bytes, value: bytes) -> None:
    """A record of version 6 or later: flipping any bit of any byte after the version byte
    makes it undecodable, and a world skips it as INVALID_RECORD (the envelope's check
    covers them all)."""
    for i in range(1, len(value)):
        bad = value[:i] + bytes((value[i] ^ 0x01,)) + value[i + 1 :]
        with pytest.raises(DecodeError):
            decode(key, bad)
        assert Log().raw(key, bad, 0).reason is Reason.INVALID_RECORD
