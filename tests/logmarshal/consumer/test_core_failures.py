"""A core that raises (a bug in logmarshal: by design it never does) stops its consumer as a
crash would, and says so to the caller. Before, the thread that stepped it died: the fetch
loop's, and the member went on heartbeating claims it no longer read (the group waited for
good); or the coordination writer's, and the member went silent while ``poll`` returned
nothing, with no error for its caller."""

from __future__ import annotations

import threading
import time
from fractions import Fraction

import pytest

from logmarshal import ConsumerFailed
from logmarshal.core import Close, Fetched, Poll, Replayed, Tick, Written

from ..consumer_world import TOPIC, drain, produce, wait_passes, wait_until


class _Bug(Exception):
    """What the core raises here."""


def _failing_on(consumer, kind: type) -> list[object]:
    """From now on ``consumer``'s core raises when it is stepped with an event of ``kind``
    (alone, or among others); returns the events it failed on."""
    core = consumer._core
    step, step_many = core.step, core.step_many
    failed: list[object] = []

    def fail_if(events) -> None:
        for event in events:
            if isinstance(event, kind):
                failed.append(event)
                raise _Bug(f"stepped with {event!r}")

    def failing_step(now, event, **kwargs):
        fail_if([event])
        return step(now, event, **kwargs)

    def failing_step_many(now, events, **kwargs):
        events = list(events)
        fail_if(events)
        return step_many(now, events, **kwargs)

    core.step, core.step_many = failing_step, failing_step_many
    return failed


def _holding(manual):
    """Member ``a`` of a one-partition topic, having handed out its first 5 records."""
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 5)
    a = manual.consumer("a")
    assert [m.offset for m in drain(a, 5)] == list(range(5))
    return a


def _fails_on_the_next_fetch(manual, a) -> None:
    """``a``'s core fails on the records it fetches next, which are written now."""
    _failing_on(a, Fetched)
    produce(manual.cluster, 0, 5)


def _fails(consumer) -> ConsumerFailed:
    """The error ``poll`` raises once the consumer failed (within a bound)."""
    raised: list[ConsumerFailed] = []

    def polled() -> bool:
        try:
            consumer.poll(0)
        except ConsumerFailed as exc:
            raised.append(exc)
        return bool(raised)

    wait_until(polled, what="poll() raising ConsumerFailed")
    return raised[0]


def _advance_beside(manual, consumer, seconds: float) -> None:
    """Advance the clock by ``seconds`` in quarter-HB steps, each after ``consumer``'s driver
    acted on the last (an alive member heartbeats on time all along)."""
    for _ in range(round(seconds / (manual.hb / 4))):
        manual.clock.advance(manual.hb / 4)
        if not consumer.closed:
            wait_passes(consumer, 2)


@pytest.mark.parametrize("kind", [Fetched, Written], ids=["fetch loop", "writer"])
def test_a_core_that_fails_stops_the_consumer_as_a_crash_would(manual, kind) -> None:
    a = _holding(manual)
    failed = _failing_on(a, kind)
    produce(manual.cluster, 0, 5)  # fetched (and committed, then written) by a
    if kind is Written:
        manual.clock.advance(manual.hb)  # a heartbeat is due: written, then answered
    error = _fails(a)
    assert failed and isinstance(error.__cause__, _Bug)
    assert "as a crash would" in str(error)
    wait_until(lambda: a.closed, what="a closing itself")
    with pytest.raises(ConsumerFailed):  # and keeps saying why, not "closed"
        a.poll(0)
    # a's claim goes stale, as after a crash: another member takes the partition over (while
    # a heartbeat its claim from the other threads, this never came)
    _advance_beside(manual, a, 3 * manual.hb)
    b = manual.consumer("b")
    wait_until(lambda: b.claims() == [(TOPIC, 0)], what="b's takeover")
    handed = [m.offset for m in drain(b, 5)]
    if handed[0] == 0:  # (ALO: a failed before a heartbeat carried its commits of 0..4)
        handed += [m.offset for m in drain(b, 5)]
    assert handed[-5:] == list(range(5, 10))


def test_a_core_that_fails_ends_run_with_the_error(manual) -> None:
    """``run()`` ends on ClosedError quietly (another thread closed the consumer); a failed
    consumer's run ends with ConsumerFailed instead, so a worker running it learns."""
    a = _holding(manual)
    _fails_on_the_next_fetch(manual, a)
    stop = threading.Event()
    bound = threading.Timer(10, stop.set)  # (a run that never fails ends, and fails below)
    bound.start()
    try:
        with pytest.raises(ConsumerFailed):
            a.run(lambda message: None, poll_timeout=0.05, stop=stop)
    finally:
        bound.cancel()


def test_a_failed_core_is_stepped_no_more(manual) -> None:
    """Once failed, nothing steps the core again: no Tick of the driver, no answer of the
    writer, no Close of the close (each could write what a core not to be trusted decides;
    a review of the fail-stop)."""
    a = _holding(manual)
    core = a._core
    step, step_many = core.step, core.step_many
    stepped: list[object] = []

    def counted_step(now, event, **kwargs):
        stepped.append(event)
        return step(now, event, **kwargs)

    def counted_step_many(now, events, **kwargs):
        events = list(events)
        stepped.extend(events)
        return step_many(now, events, **kwargs)

    core.step, core.step_many = counted_step, counted_step_many
    _fails_on_the_next_fetch(manual, a)  # (wraps the counting)
    _fails(a)
    wait_until(lambda: a.closed, what="a closing itself")
    assert not [e for e in stepped if isinstance(e, Close)]  # close(release=False) stepped it
    before = len(stepped)
    with pytest.raises(ConsumerFailed):
        a.poll(0)  # (nor does a poll)
    assert len(stepped) == before


def test_a_loop_over_a_failed_consumer_raises_rather_than_ends(manual) -> None:
    """``for m in consumer`` ended quietly once the consumer closed itself (a helper's
    attack): its loop stops on ``closed`` before the poll that would raise."""
    a = _holding(manual)
    _fails_on_the_next_fetch(manual, a)
    wait_until(lambda: a.closed, what="a closing itself")  # (a poll would raise: no loop)
    deadline = time.monotonic() + 10
    with pytest.raises(ConsumerFailed):
        for _ in a:
            if time.monotonic() > deadline:
                break  # (never failed: not raised either)


def test_a_poll_whose_own_step_fails_raises_at_once(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 5)
    a = manual.consumer("a")
    assert [m.offset for m in drain(a, 2, max_records=2)] == [0, 1]
    _failing_on(a, Poll)
    with pytest.raises(ConsumerFailed):
        a.poll(0)  # (returned [], and only the next poll raised)


def test_a_core_that_fails_during_close_releases_nothing(manual) -> None:
    """The core failed inside ``close(release=True)`` (here: ``on_revoked`` seeks, and the
    step after the seek fails); close went on to release with the failed core's positions.
    Now the claim goes stale, as after a crash: nobody takes it until 2·HB passed."""
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 10)

    def on_revoked(keys) -> None:
        _failing_on(a, Tick)
        a.seek(TOPIC, 0, 3)

    a = manual.consumer("a", on_revoked=on_revoked)
    drain(a, 5)
    a.close()
    with pytest.raises(ConsumerFailed):
        a.poll(0)
    b = manual.consumer("b")
    wait_passes(b, 10)  # the clock stands still: a released claim would be b's by now
    assert b.claims() == []
    _advance_beside(manual, b, 3 * manual.hb)
    wait_until(lambda: b.claims() == [(TOPIC, 0)], what="b's takeover of the stale claim")


def test_a_core_that_fails_while_the_constructor_runs_fails_the_constructor(realtime) -> None:
    """The replay steps the core from the moment it listens, before the constructor ends:
    a failure then closed a consumer half started (its writer thread ran on, its name stayed
    reserved). Now the constructor raises it and undoes what it started."""
    from logmarshal.consumer import Consumer

    realtime.cluster.create_topic(TOPIC, 1)
    realtime.consumer("b")  # its heartbeats keep a's replay reporting
    m = realtime.marshaler("a")
    add = m.add_batch_listener

    def add_then_wait(listener) -> None:
        _failing_on(listener.__self__, Replayed)
        add(listener)
        wait_until(lambda: listener.__self__.failure is not None, what="the failure")

    m.add_batch_listener = add_then_wait
    with pytest.raises(ConsumerFailed):
        Consumer(m, TOPIC)
    m.add_batch_listener = add
    again = realtime.consumer(m)  # the name was given back
    wait_until(lambda: again.claims() or True)


def test_a_close_while_the_failed_consumer_closes_itself_returns_once_it_has(
    manual, monkeypatch
) -> None:
    """A failed consumer closes itself on a thread of its own; a ``close()`` meanwhile (the
    user's, the Marshaler's, an App's) returned at once, its threads still running."""
    from logmarshal.consumer.writer import CoordinationWriter

    stop = CoordinationWriter.stop

    def slow_stop(self, timeout) -> None:
        time.sleep(0.3)  # (a writer with writes in flight over the network)
        stop(self, timeout)

    monkeypatch.setattr(CoordinationWriter, "stop", slow_stop)
    a = _holding(manual)
    _fails_on_the_next_fetch(manual, a)
    wait_until(lambda: a.failure is not None, what="the failure")
    a.close()
    left = [t.name for t in threading.enumerate() if t.name.startswith(a._name_prefix)]
    assert left == [], left


def test_an_app_whose_consumer_fails_ends_its_run_with_the_error(cluster, tmp_path) -> None:
    """``App.run`` returned the count it handled once its consumer closed, as after an
    orderly ``close()``, when the consumer had failed (a helper's attack); ``close()``
    after it still stops everything."""
    from logmarshal.streams import App, Processor, Topology
    from logmarshal.streams.serde import string_deserializer
    from storage import NewRecord

    app: list[App] = []

    class FailsTheCoreOnce(Processor):
        armed = False

        def process(self, record) -> None:
            if not FailsTheCoreOnce.armed:  # the consumer's core fails while this runs
                FailsTheCoreOnce.armed = True
                _failing_on(app[0].consumer, Fetched)
                cluster.produce("lines", 0, [NewRecord(b"more", timestamp=0)])
                wait_until(lambda: app[0].consumer.closed, what="the consumer's stop")

    topology = Topology()
    topology.add_source("lines", "lines", value_deserializer=string_deserializer)
    topology.add_processor("p", FailsTheCoreOnce, ["lines"])
    cluster.create_topic("lines", 1)
    cluster.produce("lines", 0, [NewRecord(b"x %d" % i, timestamp=0) for i in range(3)])
    settings = {"client_id": "a", "heartbeat_interval": 0.3, "commit_interval": 0.05}
    app.append(App(cluster, "wc", topology, state_dir=tmp_path / "s", **settings))
    stop = threading.Timer(15, app[0].stop)  # (a run that never fails ends, and fails below)
    stop.start()
    try:
        with pytest.raises(ConsumerFailed):
            app[0].run(poll_timeout=0.05)
    finally:
        stop.cancel()
        app[0].close()
    assert not [t for t in threading.enumerate() if t.name.startswith("logmarshal-consumer")]


def _command(manual, a, name: str):
    """The call of ``a``'s command ``name`` on its partition 0, as a user makes it (commit:
    of a record polled now, not committed yet)."""
    if name == "commit":
        produce(manual.cluster, 0, 1)
        got: list = []
        wait_until(lambda: got.extend(a.poll(0)) or got, what="a record to commit")
        return lambda: a.commit(*got)
    return {
        "seek": lambda: a.seek(TOPIC, 0, 7),
        "pause": lambda: a.pause(0),
        "resume": lambda: a.resume(0),
    }[name]


@pytest.mark.parametrize("name", ["commit", "seek", "pause", "resume"])
def test_a_command_the_core_fails_fails_the_consumer(manual, name) -> None:
    """A command of the caller's that raises in the core where it does not by design (a bug)
    is the core failing, as a step that raises is: the consumer stops as a crash would, and
    the call raises ConsumerFailed. Before, the error went to the caller unmarked, and the
    consumer went on with a core not to be trusted."""
    a = _holding(manual)
    core = a._core
    entry = {"commit": "commit_one", "seek": "seek", "pause": "pause", "resume": "resume"}[name]
    command = _command(manual, a, name)

    def broken(*args, **kwargs):
        raise _Bug(f"{entry}{args!r}")

    for attr in {entry, "commit"} if name == "commit" else {entry}:
        setattr(core, attr, broken)
    with pytest.raises(ConsumerFailed) as raised:
        command()
    assert isinstance(raised.value.__cause__, _Bug)
    assert a.failure is not None
    wait_until(lambda: a.closed, what="a closing itself")
    with pytest.raises(ConsumerFailed):  # every later call says why, not "closed"
        command()
    with pytest.raises(ConsumerFailed):
        a.poll(0)


def test_what_the_caller_got_wrong_stays_the_callers(manual) -> None:
    """The errors a command raises by design (a seek it refuses, a message built by hand
    that is no message a consumer read) are the caller's: the consumer goes on."""
    a = _holding(manual)
    with pytest.raises(ValueError):
        a.seek(TOPIC, 0, -1)
    with pytest.raises(TypeError):
        a.seek(TOPIC, 0, "7")
    produce(manual.cluster, 0, 1)
    polled: list = []
    wait_until(lambda: polled.extend(a.poll(0)) or polled, what="the record")
    (got,) = polled  # outstanding: a commit searches for its offset among them
    with pytest.raises(TypeError, match="read by a consumer"):
        a.commit(got._replace(offset="x"))
    with pytest.raises(TypeError, match="takes messages"):
        a.commit((TOPIC, 0))
    assert a.failure is None and not a.closed
    assert a.commit(got)


def test_an_offset_of_another_type_committed_does_not_fail_the_core_later(manual) -> None:
    """A hand-built Message whose offset equals the polled one but is of another type (a
    numpy integer, True, 5.0) was committed as the position, and the next heartbeat's
    encoding failed the core (a review, 2026-12-06): the position stays an int of ours."""
    a = _holding(manual)
    produce(manual.cluster, 0, 2)
    polled: list = []
    wait_until(lambda: polled.extend(a.poll(0)) or len(polled) == 2, what="the records")
    assert a.commit(polled[0]._replace(offset=float(polled[0].offset)))
    assert a.commit(polled[1]._replace(offset=Fraction(polled[1].offset)))
    _advance_beside(manual, a, 2 * manual.hb)  # heartbeats carry the position
    assert a.failure is None and not a.closed
    assert a.position(TOPIC, 0) == 6 and type(a.position(TOPIC, 0)) is int


def test_a_commit_that_sees_the_consumer_released_by_a_failure_sees_the_failure(manual):
    """``commit`` reads the released flag without the lock; the failure set it before it
    recorded the failure, so a commit meanwhile raised ClosedError, not ConsumerFailed (a
    review, 2026-12-06: an error whose repr, which the failure takes, was slow)."""
    a = _holding(manual)
    seen: list[tuple[bool, bool]] = []

    class _SeenBug(_Bug):
        def __repr__(self) -> str:  # taken while the failure is recorded
            seen.append((a._released, a.failure is not None))
            return "_SeenBug()"

    def broken(keys):
        raise _SeenBug()

    a._core.pause = broken
    with pytest.raises(ConsumerFailed):
        a.pause(0)
    assert seen and all(failed or not released for released, failed in seen)


def test_a_cluster_closed_under_a_consumer_stops_it_as_a_crash(tmp_path) -> None:
    """The cluster closed while its consumer ran: every coordination write failed at once
    with ClosedError, the core wrote it again at once, and the writer thread spun a whole
    core until the consumer was closed (an attack on the entry points, 2026-12-06). The
    consumer stops as a crash would now, and says why."""
    import logmarshal
    from logmarshal import Consumer, Marshaler

    cluster = logmarshal.connect(data_dir=tmp_path / "d")
    cluster.create_topic(TOPIC, 2)
    marshaler = Marshaler(cluster, "a", "g", 0.2, fetch_wait=0.05)
    consumer = Consumer(marshaler, TOPIC)
    try:
        wait_until(lambda: (consumer.poll(0.05), len(consumer.claims()) == 2)[1], what="claims")
        cluster.close()
        failed = _fails(consumer)
        assert "its cluster was closed under it" in str(failed)
        wait_until(lambda: consumer._close_done.is_set(), what="the failed consumer closed")
        # the writer thread that spun is gone (closed with the consumer)
        wait_until(
            lambda: not [t for t in threading.enumerate() if t.name.endswith(":g:a:write:all")],
            what="the coordination writer stopped",
        )
    finally:
        consumer.close()
        marshaler.close()
