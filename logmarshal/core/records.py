"""The coordination records a member writes, and how a write is remembered until its verdict.

Every write gets a token and a :class:`~.state.Pending` entry; the edge answers with
``Written``/``WriteFailed`` and the replay with the verdict (``verdicts``). A task's
heartbeat and release carry its vector of source positions (PROTOCOL.md "Tasks (version 3)").
"""

from __future__ import annotations

import logging
from typing import TypedDict

from rationalizer import (
    Heartbeat,
    HeartbeatingTask,
    Message,
    NamingTenure,
    ReleasingPartition,
    ReleasingTask,
    encode,
)

from .actions import Action, Write
from .release import Position
from .state import Key, MemberState, Pending, withheld

__all__ = ["WriterIds", "heartbeat_record", "ids", "release_record", "write", "write_encoded"]

log = logging.getLogger(__name__)


class WriterIds(TypedDict):
    """The fields that say who writes a record: a TypedDict, so ``**ids`` into a message's
    constructor is checked field by field."""

    client_id: str
    instance_id: str
    group_id: str


def ids(st: MemberState) -> WriterIds:
    """The fields that say who writes a record."""
    o = st.options
    return {"client_id": o.client_id, "instance_id": o.instance_id, "group_id": o.group_id}


def write(st: MemberState, out: list[Action], p: Pending, msg: Message) -> int:
    """Ask the edge to write ``msg`` and remember ``p`` until its verdict; returns the token.

    Nothing is written to a halted coordination partition (``core.rewind``) but for a
    partition the log determines again there: the last guard, whatever asked for it."""
    key, value = encode(msg)
    return write_encoded(st, out, p, key, value)


def write_encoded(st: MemberState, out: list[Action], p: Pending, key: bytes, value: bytes) -> int:
    """:func:`write` of a record encoded already (``key``, ``value``: the bytes a member's
    repeated MemberHeartbeat had last time)."""
    if st.halted and withheld(st, p):
        log.debug(
            "not writing %s of %s/%d: coordination partition %d is halted",
            p.kind,
            p.topic,
            p.partition,
            p.cp,
        )
        return 0
    st.token += 1
    st.wrote.add(p.cp)
    p.token = st.token
    st.pending[st.token] = p
    # (a MemberHeartbeat is a heartbeat to whoever traces writes)
    out.append(Write(st.token, p.cp, key, value, "heartbeat" if p.kind == "beats" else p.kind))
    return st.token


def heartbeat_record(
    st: MemberState, key: Key, position: Position, tenure: int | None = None
) -> Heartbeat | HeartbeatingTask:
    """The heartbeat of ``key`` carrying ``position``: a task's carries its vector and,
    capped at 8 or more, names the ``tenure`` it beats in when we know it (version 8,
    property i; else version 3)."""
    hb = st.options.heartbeat_interval_ms
    if isinstance(position, tuple):
        if st.options.protocol_version < 8:
            tenure = None  # capped below version 8: a heartbeat its replayers can read
        return HeartbeatingTask(
            **ids(st),
            topic=key[0],
            partition=key[1],
            heartbeat_interval_ms=hb,
            positions=position,
            tenure=tenure,
        )
    return Heartbeat(
        **ids(st), topic=key[0], partition=key[1], heartbeat_interval_ms=hb, last_offset=position
    )


def write_naming(st: MemberState, out: list[Action], key: Key, cp: int, now: int) -> int:
    """Write a NamingTenure (version 9) of ``key``: we hold it in a tenure without a name;
    the verdict at its offset is the tenure's name. Returns the token (0: withheld)."""
    msg = NamingTenure(**ids(st), topic=key[0], partition=key[1])
    return write(st, out, Pending("name", key[0], key[1], cp, now), msg)


def release_record(
    st: MemberState, key: Key, position: Position, tenure: int | None = None
) -> ReleasingPartition | ReleasingTask:
    """The release of ``key`` at ``position`` (a task's carries its vector), naming the
    ``tenure`` it ends (version 6), the offset of the claim or restart takeover that began
    it, when we know it (else version 1, a task's version 3)."""
    if st.options.protocol_version < 6:
        tenure = None  # capped below version 6: a release its replayers can read
    if isinstance(position, tuple):
        return ReleasingTask(
            **ids(st), topic=key[0], partition=key[1], positions=position, tenure=tenure
        )
    return ReleasingPartition(
        **ids(st), topic=key[0], partition=key[1], last_offset=position, tenure=tenure
    )
