"""Hypothesis strategies for coordination messages."""

from __future__ import annotations

from hypothesis import strategies as st

from rationalizer import (
    MAX_HEARTBEAT_INTERVAL_MS,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    ReleaseGroup,
    ReleasingPartition,
)

ids = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
topics = st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True).filter(
    lambda t: t not in (".", "..")
)
partitions = st.integers(0, 2**31 - 1)
offsets = st.integers(-1, 2**63 - 1)
heartbeat_intervals = st.integers(1, MAX_HEARTBEAT_INTERVAL_MS)
auth_tags = st.one_of(st.none(), st.binary(min_size=32, max_size=32))


def _common(cls, **more):
    return st.builds(cls, client_id=ids, instance_id=ids, group_id=ids, **more)


messages = st.one_of(
    _common(
        Heartbeat,
        topic=topics,
        partition=partitions,
        last_offset=offsets,
        heartbeat_interval_ms=heartbeat_intervals,
        auth_tag=auth_tags,
    ),
    _common(
        ClaimingPartition,
        topic=topics,
        partition=partitions,
        heartbeat_interval_ms=heartbeat_intervals,
    ),
    _common(ReleasingPartition, topic=topics, partition=partitions, last_offset=offsets),
    _common(ClaimingMessages, topic=topics, partition=partitions, proposed_last_offset=offsets),
    _common(ReleaseGroup, msg_expire_time=st.integers(0, 2**63 - 1), auth_tag=auth_tags),
)
