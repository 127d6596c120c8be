"""Small builders shared by the rationalizer tests."""

from __future__ import annotations

from rationalizer import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    ReleaseGroup,
    ReleasingPartition,
    Verdict,
    WorldState,
    encode,
)

HB = 1000
G = "g"
T = "orders"


def ids(who: str) -> dict[str, str]:
    """``"c1:i1"`` -> client c1, instance i1."""
    client, instance = who.split(":")
    return {"client_id": client, "instance_id": instance}


def claim(who: str, p: int = 0, g: str = G, t: str = T) -> ClaimingPartition:
    return ClaimingPartition(**ids(who), group_id=g, topic=t, partition=p)


def beat(who: str, last: int, p: int = 0, g: str = G, t: str = T) -> Heartbeat:
    return Heartbeat(**ids(who), group_id=g, topic=t, partition=p, last_offset=last)


def release(who: str, last: int, p: int = 0, g: str = G, t: str = T) -> ReleasingPartition:
    return ReleasingPartition(**ids(who), group_id=g, topic=t, partition=p, last_offset=last)


def claim_msgs(who: str, through: int, p: int = 0, g: str = G, t: str = T) -> ClaimingMessages:
    return ClaimingMessages(
        **ids(who), group_id=g, topic=t, partition=p, proposed_last_offset=through
    )


def release_group(who: str, expires: int, g: str = G) -> ReleaseGroup:
    return ReleaseGroup(**ids(who), group_id=g, msg_expire_time=expires)


class Log:
    """A coordination partition being written and replayed in one go."""

    def __init__(self, hb: int = HB) -> None:
        self.w = WorldState(hb)
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
