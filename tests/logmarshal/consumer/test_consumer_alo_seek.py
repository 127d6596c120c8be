"""ALO at the Consumer: a seek forward passes no record handed out and not committed
(the core's side: tests/logmarshal/core/test_alo_seek_forward.py)."""

from __future__ import annotations

import pytest

from ..consumer_world import TOPIC, produce, wait_until


def test_alo_seek_forward_inside_the_read_ahead_keeps_what_is_not_committed(realtime) -> None:
    """ALO: user code polls 0..9, does not commit them, and seeks to 50 (read already). The
    position the next heartbeat carries stays below 0 until 0..9 are committed, and a close
    gives the group back 0 (a crash there would repeat them, as Kafka's seek commits
    nothing). Before, the seek set the position to 49, over the ten records never committed."""
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 100)
    consumer = realtime.consumer("a", auto_offset_reset="earliest", batch_size=10)
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")
    got = consumer.poll(5.0)
    assert [m.offset for m in got] == list(range(10))
    wait_until(lambda: consumer.lag().get((TOPIC, 0)) == 100, what="the first heartbeat")
    consumer.seek(TOPIC, 0, 50)
    assert consumer.position(TOPIC, 0) == -1
    after = consumer.poll(5.0)
    assert [m.offset for m in after] == list(range(50, 60))
    consumer.commit(*after)
    assert consumer.position(TOPIC, 0) == -1  # 0..9 still outstanding
    consumer.commit(*got)
    assert consumer.position(TOPIC, 0) == 59  # over what user code sought past
    consumer.close()
    assert consumer.marshaler.resume_offset(TOPIC, 0) == 60


def test_a_poll_with_a_nan_timeout_is_refused(realtime) -> None:
    """A NaN timeout never ended and burnt a core (an attack on the API)."""
    realtime.cluster.create_topic(TOPIC, 1)
    consumer = realtime.consumer("a")
    with pytest.raises(ValueError, match="nan"):
        consumer.poll(float("nan"))


@pytest.mark.parametrize("wrong", [None, "x", [1]])
def test_commit_of_something_not_a_message_says_what_it_takes(realtime, wrong) -> None:
    """``commit(batch)`` for ``commit(*batch)`` raised AttributeError from inside."""
    realtime.cluster.create_topic(TOPIC, 1)
    consumer = realtime.consumer("a")
    with pytest.raises(TypeError, match=r"commit\(\*batch\)"):
        consumer.commit(wrong)
    with pytest.raises(TypeError, match=r"commit\(\*batch\)"):
        consumer.commit(wrong, wrong)
