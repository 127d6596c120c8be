"""The edge's answer to ``CatchUp`` (logmarshal/consumer/catchup.py), without threads: a
stand-in log that grows by a record at every look-up of its end, and a replay that applies
one record per wait; the answer says when its ends were looked up."""

from __future__ import annotations

from collections.abc import Callable

from logmarshal.consumer.catchup import CatchingUp


class BusyLog:
    def __init__(self) -> None:
        self.end = 10
        self.applied = 9  # through this offset: caught up with the end of 10
        self.looked_up = 0
        self.during_wait: Callable[[], None] | None = None  # another thread meanwhile
        self.now = 0  # ms: a wait lasts 20

    def clock(self) -> int:
        return self.now

    def log_ends(self) -> dict[int, int]:
        self.looked_up += 1
        self.end += 1  # another member's record lands as the end is looked up
        return {0: self.end}

    def wait_reached(self, ends: dict[int, int], timeout: float) -> bool:
        self.now += 20
        if self.during_wait is not None:
            self.during_wait()
            self.during_wait = None
        if self.applied >= ends[0] - 1:
            return True
        self.applied = min(self.applied + 1, self.end - 1)  # a record per wait
        return False


def test_the_ends_of_one_ask_are_waited_for_until_reached() -> None:
    log = BusyLog()
    catching = CatchingUp(log, log.clock)  # type: ignore[arg-type]
    catching.ask()
    assert catching.wanted
    passes = 1
    while catching.reached(0.02) is None:
        passes += 1
        # ends looked up afresh each pass would stay a record ahead of this replay forever
        assert passes <= 3, f"not caught up in {passes} passes"
    assert (log.looked_up, passes) == (1, 2)
    assert not catching.wanted


def test_an_ask_while_waiting_looks_the_ends_up_again() -> None:
    log = BusyLog()
    catching = CatchingUp(log, log.clock)  # type: ignore[arg-type]
    catching.ask()
    log.applied = 10  # the replay is already past the first look-up's end (11)
    log.during_wait = catching.ask  # another stall meanwhile: earlier ends answer it not
    assert catching.reached(0.02) is None
    assert catching.wanted and log.looked_up == 1
    assert catching.reached(0.02) is None  # looked up again (end 12): not reached yet
    assert catching.reached(0.02) is not None
    assert log.looked_up == 2 and not catching.wanted


def test_the_answer_is_when_its_ends_were_looked_up_not_when_they_were_reached() -> None:
    """The core refuses ends looked up before a stall (``Replayed.ends_at``): a process
    stopped after its look-up and woken after the replay reached the ends says when it
    looked up, not when it was told."""
    log = BusyLog()
    catching = CatchingUp(log, log.clock)  # type: ignore[arg-type]
    catching.ask()
    log.now = 100
    assert catching.reached(0.02) is None  # looked up at 100, not reached by 120
    log.now = 5_000  # stopped while it waited
    assert catching.reached(0.02) == 100
