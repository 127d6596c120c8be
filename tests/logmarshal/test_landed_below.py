"""PROTOCOL.md, "A coordination log that loses records", rewound (d): a write the log
acknowledges below the offset the writer's replay had reached when it was sent shows that
the log went back, even when the record at that offset is now our own (a log that lost its
tail and regrew it: the replay's world holds, for that offset, the verdict of the record it
applied there, which the member would read as its write's). The cluster below answers one
write at an offset the replay had applied, as a broker after an unclean election does; the
records written are alike, so the log does hold at that offset a record equal to ours and
check (c), which compares with the log, passes it."""

from __future__ import annotations

import logging

import attrs
import pytest

from logmarshal import EmbeddedCluster
from logmarshal._coordlog import COORDINATION_TOPIC
from logmarshal.marshaler import Marshaler
from rationalizer import AnnouncingMember, encode
from scenarios.common import wait_until


class _AnswersBelow:
    """The cluster, answering the ``__marshal`` write after ``arm()`` at offset 0."""

    def __init__(self, inner: EmbeddedCluster) -> None:
        self._inner = inner
        self.armed = False

    def produce(self, topic, partition, records, **kw):
        result = self._inner.produce(topic, partition, records, **kw)
        if topic == COORDINATION_TOPIC and self.armed:
            self.armed = False
            n = len(result.offsets)
            return attrs.evolve(result, base_offset=0, last_offset=n - 1, record_offsets=())
        return result

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _record(m: Marshaler) -> tuple[bytes, bytes]:
    return encode(
        AnnouncingMember(
            client_id="a",
            instance_id=m.instance_id,
            group_id="g",
            topics=(("events", 1),),
            heartbeat_interval_ms=500,
            version=4,
        )
    )


@pytest.mark.parametrize("check", [True, False])
def test_a_write_acknowledged_below_the_replay_halts_its_partition(tmp_path, caplog, check):
    caplog.set_level(logging.ERROR)
    with EmbeddedCluster(tmp_path / "data") as inner:
        cluster = _AnswersBelow(inner)
        m = Marshaler(cluster, "a", "g", 0.5, _check_rewind=check)  # type: ignore[arg-type]
        try:
            for _ in range(3):
                m.write_records(0, [_record(m)])
            assert wait_until(lambda: m.replay_offsets()[0] >= 2, 10)
            cluster.armed = True
            m.write_records(0, [_record(m)])  # acknowledged at 0, which the replay applied
            if check:
                halt = m.halts().get(0)
                assert halt is not None and halt.why == "rewound", m.halts()
                assert any("below offset" in r.getMessage() for r in caplog.records)
            else:
                assert m.halts() == {}
        finally:
            m.close()
