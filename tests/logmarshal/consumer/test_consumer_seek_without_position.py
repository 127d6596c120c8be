"""auto_offset_reset="error" at the Consumer: the user answers NoPosition with seek(3) and
closes before polling again. The release must carry the seek's position: under ALO it carried
the commit tracker's -1 (found by an attack on 4f14d66; AMO since 4f14d66 itself), so the
group resumed at 0 and the next member, also "error", was handed 0, 1, 2, records the user
skipped, without the NoPosition the policy promises."""

from __future__ import annotations

import pytest

from logmarshal.consumer import NoPosition

from ..consumer_world import TOPIC, drain, produce, wait_until


@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_error_seek_then_close_the_next_member_does_not_start_below_it(realtime, mode) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    first = realtime.consumer("a", auto_offset_reset="error", mode=mode)
    wait_until(lambda: first.claims() == [(TOPIC, 0)], what="the claim")
    with pytest.raises(NoPosition):
        first.poll(1.0)
    first.seek(TOPIC, 0, 3)
    first.close()
    resumes = first.marshaler.resume_offset(TOPIC, 0)  # ALO: 0
    second = realtime.consumer("b", auto_offset_reset="error", mode=mode)
    wait_until(lambda: second.claims() == [(TOPIC, 0)], what="the second claim")
    try:
        got = [m.offset for m in drain(second, 2)]
    except NoPosition:
        return  # as the policy promises
    assert min(got) >= 3, f"the group resumed at {resumes}; the next member was handed {got}"
