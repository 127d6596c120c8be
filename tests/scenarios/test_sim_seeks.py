"""The user-hand schedule's deep variant: what plain ``--seeks`` missed (an attack on 831e9b7
and 74786dc found it), and the variant that finds it (``--seeks --read-ahead``: members read ahead as a Consumer does,
user code pauses partitions, retention and tail cuts land in what a member read).

2757f24's "an ALO reset forward keeps what was read" put back (the reset drops the records
a member read before retention passed them): plain ``--seeks`` never reaches the state (its
members fetch one batch ahead, retention and cuts land anywhere; 0 of the mutant's branches
taken over seeds 0..99), and had it reached it, the checks excuse it (everything below the
log start counts as "what the log deleted", read or not). The deep variant reaches it and
the new check (``UserHand.handed``: what an instance read before retention deleted it is
handed out, in order, before anything after it, within the tenure, unless user code seeks)
finds it; the fixed core holds it (0 violations over seeds 0..199, plain and deep).
"""

from __future__ import annotations

import pytest

from logmarshal.core import fetching, member
from logmarshal.core.fetching import move
from logmarshal.core.state import read
from scenarios import sim_seeks
from scenarios.sim import run_seed

#: .ci/run's second stage (-m long): the README's run keeps within its 20 minutes
pytestmark = pytest.mark.long

#: seeds on which the deep schedule finds the mutant (2 of seeds 0..199)
KEEP_SEEDS = (14, 29)


def _alo_refused(st, event):
    """The ALO read (not under "error") whose fetch ``event`` refuses, and the reset
    policy's target, or (None, None)."""
    held = read(st, event.topic, event.partition)
    if (
        held is None
        or held.fetch_token != event.token
        or held.next_fetch is None
        or st.options.mode == "amo"
        or st.options.auto_offset_reset == "error"
    ):
        return None, None
    return held, event.start if st.options.auto_offset_reset == "earliest" else event.end


def _dropping(real):
    def on_out_of_range(st, now, event, out):
        """Before 2757f24: an ALO reset forward (below the log start) moves, dropping the
        records read before the start passed them."""
        held, target = _alo_refused(st, event)
        if held is not None and held.next_fetch < event.start and target >= held.next_fetch:
            held.fetch_token = None
            move(st, held, target)
            return
        real(st, now, event, out)

    return on_out_of_range


@pytest.mark.parametrize("seed", KEEP_SEEDS)
def test_the_deep_schedule_finds_a_reset_that_drops_what_was_read(seed, monkeypatch):
    assert run_seed(seed, seeks="deep").violations == ()
    monkeypatch.setattr(member, "on_out_of_range", _dropping(fetching.on_out_of_range))
    found = run_seed(seed, seeks="deep")
    assert any("read before retention deleted it" in v for v in found.violations), found


@pytest.mark.parametrize("seed", KEEP_SEEDS)
def test_the_old_checks_excuse_it(seed, monkeypatch):
    """Without the new check the same run passes: below the log start was all excused."""
    monkeypatch.setattr(member, "on_out_of_range", _dropping(fetching.on_out_of_range))
    monkeypatch.setattr(sim_seeks.UserHand, "handed", lambda self, inst, key, offsets: None)
    assert run_seed(seed, seeks="deep").violations == ()


def in_range_resets(real):
    """``on_out_of_range`` as it was before 972f4ba (AMO) and 3463a12 (ALO): the reset
    policy applied although the bounds hold the position (not under "error": a NoStart)."""

    def on_out_of_range(st, now, event, out):
        held = read(st, event.topic, event.partition)
        if (
            held is not None
            and held.fetch_token == event.token
            and held.next_fetch is not None
            and st.options.auto_offset_reset != "error"
            and event.start <= held.next_fetch <= event.end
        ):
            held.fetch_token = None
            target = event.start if st.options.auto_offset_reset == "earliest" else event.end
            move(st, held, target)
            return
        real(st, now, event, out)

    return on_out_of_range


def _error_first(real):
    def on_out_of_range(st, now, event, out):
        """Before 2757f24: under "error" the policy is looked at before the bounds (an
        answer whose bounds hold the position raises NoStart)."""
        held = read(st, event.topic, event.partition)
        if (
            held is not None
            and held.fetch_token == event.token
            and held.next_fetch is not None
            and st.options.auto_offset_reset == "error"
            and event.start <= held.next_fetch <= event.end
        ):
            held.fetch_token = None
            held.no_start = (held.next_fetch, event.start, event.end)
            return
        real(st, now, event, out)

    return on_out_of_range


def test_an_alo_reset_inside_the_log_is_found(monkeypatch):
    """3463a12 put back (ALO resets although the log holds its position): plain --seeks
    takes that branch 6 times over seeds 0..199 and the old checks excuse every one (a move
    back is excused by any earlier seek to below it, by anyone, at any time; "latest" from
    the handed-out position). The deep schedule with the tightened excuses finds it on seed
    356 (a skip under "latest"; 1 of seeds 0..599: the branch stays rare)."""
    assert run_seed(356, seeks="deep").violations == ()
    monkeypatch.setattr(member, "on_out_of_range", in_range_resets(fetching.on_out_of_range))
    found = run_seed(356, seeks="deep")
    assert found.violations, found


@pytest.mark.parametrize("seed", (98, 262, 289))
def test_error_policy_before_the_bounds_raises_nostart_inside_the_log(seed, monkeypatch):
    """2757f24's "bounds first under error" put back: the deep schedule draws "error" (user
    code seeks on NoPosition), and a NoStart whose bounds hold its offset is a violation
    (3 of seeds 0..399 since c50880d's live-gap stop moved seed 81's schedule)."""
    assert run_seed(seed, seeks="deep").violations == ()
    monkeypatch.setattr(member, "on_out_of_range", _error_first(fetching.on_out_of_range))
    found = run_seed(seed, seeks="deep")
    assert any("inside the log" in v for v in found.violations), found


def test_a_seek_back_that_a_freeze_delays_moves_the_position_back_allowed(monkeypatch):
    """Seed 3537 (deep): an instance seeks t/0 back below its tenure's floor, is frozen for
    830 ms by an outage (a zombie), and its next heartbeat then moves the position back
    there: the seek taking effect late, which PROTOCOL.md property g allows. The check once
    excused a seek's move back only within a window of time after it, and reported this one
    (seeds 3000..4499 of 2026-12-04). It now excuses exactly the seeking instance's records
    sent after the seek, however late they land; counted as sent before it, they are
    reported."""
    from scenarios.sim_checks import Checks

    assert run_seed(3537, seeks="deep").violations == ()
    real = Checks.sought

    def sent_before(self, now, key, through, target, who=None):
        real(self, now, key, through, target, who)
        if who is not None:  # as if every later write had been sent before the seek
            *head, _ = self.seeks[key][-1]
            self.seeks[key][-1] = (*head, 1 << 62)

    monkeypatch.setattr(Checks, "sought", sent_before)
    found = run_seed(3537, seeks="deep")
    assert any("moved back" in v for v in found.violations), found
