"""PROTOCOL.md, "A coordination log that loses records": after a failed read of ``__marshal``
the replay reads back the last record it applied, to see the log did not go back. A read
that answered nothing there (a broker slow to answer, a moving leader: what a
FaultyCluster's ``fetch_drop`` answers) was taken for "the record is not there any more",
and the whole coordination partition halted until an operator reset its groups. Nothing is
evidence while the log ends past the record: the check is retried."""

from __future__ import annotations

import logging
import time

from logmarshal import EmbeddedCluster
from logmarshal._coordlog import COORDINATION_TOPIC
from logmarshal._faults import FaultPlan, FaultyCluster
from logmarshal.marshaler import Marshaler
from tests.logmarshal.test_landed_below import _record


def test_a_read_back_that_answers_nothing_halts_nothing(tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="logmarshal._tailer")
    plan = FaultPlan(fetch_fail=0.3, fetch_drop=0.3, topics={COORDINATION_TOPIC})
    injected = 0
    for seed in range(8):
        with EmbeddedCluster(tmp_path / f"data{seed}") as inner:
            cluster = FaultyCluster(inner, plan, seed=seed)
            m = Marshaler(cluster, "a", "g", 0.5, coordination_partitions=1)
            try:
                for _ in range(15):
                    m.write_records(0, [_record(m)])
                    time.sleep(0.03)
                time.sleep(0.3)
                assert m.halts() == {}, (seed, m.halts())
            finally:
                m.close()
            injected += cluster.injected()["drop"]
    assert injected > 0
    # the case itself came up: a read-back answered nothing, and was retried
    assert any("answered nothing" in r.getMessage() for r in caplog.records)
