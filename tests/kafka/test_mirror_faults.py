"""The offsets mirror while Kafka nodes die under it (3 nodes): it lives and commits again.

librdkafka 2.16 aborts the whole process (assertion ``eonce->refcnt > 0`` in
``rd_kafka_admin_coord_response_parse``; librdkafka PR 5397) when a coordinator-bound
AdminClient request loses its connection. The mirror committed through such a request
(AlterConsumerGroupOffsets) until a core dump of the 3-node fault test showed it (the
SIGABRT that stage had met in 2 of 6 runs); it now commits as a standalone consumer does
(:class:`logmarshal.admin.mirror.KafkaOffsetSink`). Here a child process commits the
offsets of many groups (their coordinators spread over the nodes) as fast as it can while
each node in turn is killed with SIGKILL and restarted: the child must end by itself, not by
a signal, and commits must go through again after the faults. The abort is a race: this
test did not meet it in one run with the old sink, so it guards the new sink's behaviour
under faults; the evidence for the cause is the core dump's backtrace.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import start_cluster

pytestmark = [pytest.mark.kafka_cluster, pytest.mark.slow]

COMMITTER = """
import sys, time
from logmarshal.admin.mirror import KafkaOffsetSink
sink = KafkaOffsetSink(sys.argv[1], {"log_level": 0}, timeout=2.0)
groups = [f"mirror-fault-{i}" for i in range(16)]
done = failed = 0
print("ready", flush=True)
n = 0
while sys.stdin.readline().strip() != "stop":
    for group in groups:
        n += 1
        try:
            sink.commit(group, {("events", p): n for p in range(3)})
            done += 1
        except Exception:  # as the mirror's thread does: failures are retried, logged
            failed += 1
    print(done, failed, flush=True)
sink.close()
"""


def test_a_mirror_lives_through_nodes_killed_under_it(tmp_path) -> None:
    server = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500}
    kafka = start_cluster(tmp_path / "kafka", nodes=3, heap="384m", server=server)
    child = None
    try:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        admin.create_topics([NewTopic("events", 3, 3)])["events"].result(30)
        child = subprocess.Popen([sys.executable, "-c", COMMITTER, kafka.bootstrap],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline().strip() == "ready"

        def rounds(seconds: float) -> tuple[int, int]:
            """Let the child commit for ``seconds``; its (done, failed) totals."""
            deadline = time.monotonic() + seconds
            counts = (0, 0)
            while time.monotonic() < deadline:
                child.stdin.write("go\n")
                child.stdin.flush()
                line = child.stdout.readline()
                assert line, f"the committer died: {child.wait(10)} {child.stderr.read()[-2000:]}"
                done, failed = map(int, line.split())
                counts = (done, failed)
            return counts

        before, _ = rounds(3)
        assert before > 0
        for node in (1, 2, 3):
            kafka.kill(node)  # mid-commit: its coordinators' connections drop
            rounds(4)
            kafka.restart(node)
            rounds(2)
        after, failed = rounds(5)
        assert after > before, "no commit went through after the faults"
        child.stdin.write("stop\n")
        child.stdin.flush()
        assert child.wait(30) == 0, child.stderr.read()[-2000:]
        print(f"commits: {after} done, {failed} refused or unanswered")
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait(10)
        kafka.stop()
