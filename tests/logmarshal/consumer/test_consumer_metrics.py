"""Consumer metrics: a scrape of the user's endpoint during a failover shows the series move."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import start_http_server

from logmarshal.consumer import Consumer
from logmarshal.marshaler import Marshaler
from logmarshal.metrics import MarshalerMetrics

from ..consumer_world import TOPIC, drain, produce, wait_until
from ..test_marshaler_metrics import scrape


@pytest.fixture
def endpoint():
    metrics = MarshalerMetrics()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=metrics.registry)
    yield metrics, server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(10)


def test_scrape_shows_hand_out_commits_claims_lag_and_a_failover(manual, endpoint) -> None:
    metrics, port = endpoint
    cluster, clock = manual.cluster, manual.clock
    cluster.create_topic(TOPIC, 2)
    for p in range(2):
        produce(cluster, p, 40)

    def member(client_id: str) -> Consumer:
        marshaler = Marshaler(
            cluster, client_id, "g", manual.hb, fetch_wait=0.05, clock=clock, metrics=metrics
        )
        manual.marshalers.append(marshaler)
        return manual.consumer(marshaler, greedy=True)

    def value(sample: dict, name: str, **labels: str) -> float:
        return sample.get((name, tuple(sorted({"group": "g", **labels}.items()))), 0.0)

    victim = member("a")
    wait_until(lambda: len(victim.claims()) == 2, what="the victim's claims")
    drain(victim, 30, max_records=10)  # 30 handed out and committed
    uncommitted = drain(victim, 4, commit=False, max_records=4)
    before = scrape(port)
    assert value(before, "logmarshal_consumer_claims_held", client_id="a") == 2
    assert (
        value(before, "logmarshal_consumer_messages_total", client_id="a", topic=TOPIC, mode="alo")
        == 34
    )
    assert value(before, "logmarshal_consumer_committed_total", client_id="a", topic=TOPIC) == 30
    assert value(before, "logmarshal_consumer_assignments_total", client_id="a", how="claimed") == 2
    held = {m.partition for m in uncommitted}
    for p in range(2):
        pending = value(
            before, "logmarshal_consumer_commit_lag", client_id="a", topic=TOPIC, partition=str(p)
        )
        assert pending == sum(1 for m in uncommitted if m.partition == p)
        # nothing heartbeated yet on the manual clock: the lag is the whole partition
        assert (
            value(before, "logmarshal_consumer_lag", client_id="a", topic=TOPIC, partition=str(p))
            > 0
        )
    assert held  # the four uncommitted ones show up somewhere

    victim.close(release=False)  # an abrupt stop: nobody releases
    victim.marshaler.close()
    survivor = member("b")
    clock.advance(2.5)  # the victim's claims are stale by the log's clock
    wait_until(lambda: len(survivor.claims()) == 2, what="the takeover")
    after = scrape(port)
    assert value(after, "logmarshal_consumer_assignments_total", client_id="b", how="failover") == 2
    assert value(after, "logmarshal_consumer_claims_held", client_id="b") == 2
    assert ("logmarshal_consumer_claims_held", (("client_id", "a"), ("group", "g"))) not in after

    survivor.close()  # a clean close releases both
    done = scrape(port)
    assert value(done, "logmarshal_consumer_revocations_total", client_id="b", why="released") == 2
    assert not any(k[0] == "logmarshal_consumer_claims_held" for k in done)
    assert not [t for t in threading.enumerate() if t.name.startswith("logmarshal-consumer")]


def test_metrics_that_fail_on_a_commit_do_not_fail_the_consumer(
    manual, monkeypatch, caplog
) -> None:
    """A commit the core made, then metrics that raised: the Consumer took the error for
    its core's, stopped as a crash would (ConsumerFailed) and left its claims to lapse."""
    metrics = MarshalerMetrics()

    def broken(*_args) -> None:
        raise RuntimeError("the registry is broken")

    monkeypatch.setattr(metrics, "committed", broken)
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 6)
    marshaler = Marshaler(
        manual.cluster, "a", "g", manual.hb, fetch_wait=0.05, clock=manual.clock, metrics=metrics
    )
    manual.marshalers.append(marshaler)
    a = manual.consumer(marshaler, greedy=True)
    got = drain(a, 3, commit=False, max_records=3)
    assert a.commit(got[0]) and a.commit(*got[1:])  # one message, then a batch
    assert "the registry is broken" in caplog.text
    assert [m.offset for m in drain(a, 3, max_records=3)] == [3, 4, 5]  # it goes on


def _samples(metrics: MarshalerMetrics) -> list[tuple[str, tuple, float]]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(metrics.registry).decode()
    return [
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def _one_sample_a_series(samples) -> dict[tuple[str, tuple], float]:
    series = [(name, labels) for name, labels, _ in samples]
    assert len(series) == len(set(series)), sorted(s for s in series if series.count(s) > 1)
    return {(name, labels): value for name, labels, value in samples}


def test_the_consumers_of_one_marshaler_give_one_sample_a_series(manual) -> None:
    """Two Consumers of one Marshaler (different topics, as the README allows) each gave a
    ``claims_held`` and a ``reader_renewals`` sample under the same labels: the text format
    allows one, and a server kept either (2 or 3 here, never 5). An attack on the views,
    2026-12-06."""
    metrics = MarshalerMetrics()
    cluster = manual.cluster
    cluster.create_topic("left", 2)
    cluster.create_topic("right", 3)
    marshaler = Marshaler(
        cluster, "a", "g", manual.hb, fetch_wait=0.05, clock=manual.clock, metrics=metrics
    )
    manual.marshalers.append(marshaler)
    left, right = Consumer(marshaler, "left"), Consumer(marshaler, "right")
    manual.consumers += [left, right]
    wait_until(lambda: len(left.claims()) == 2 and len(right.claims()) == 3, what="claims")
    series = _one_sample_a_series(_samples(metrics))
    who = (("client_id", "a"), ("group", "g"))
    assert series["logmarshal_consumer_claims_held", who] == 5
    assert series["logmarshal_marshaler_claims_held", who] == 5
    left.close()
    series = _one_sample_a_series(_samples(metrics))
    assert series["logmarshal_consumer_claims_held", who] == 3


def test_a_fenced_instance_beside_its_successor_gives_no_second_sample(manual) -> None:
    """A restarted instance of a client in the process that still holds the fenced one:
    every ``logmarshal_marshaler_*`` series had a sample from each, and the fenced one's
    ``claims_held`` counted the new instance's claims as its own."""
    metrics = MarshalerMetrics()
    manual.cluster.create_topic(TOPIC, 2)

    def instance() -> tuple[Marshaler, Consumer]:
        marshaler = Marshaler(
            manual.cluster,
            "a",
            "g",
            manual.hb,
            fetch_wait=0.05,
            clock=manual.clock,
            metrics=metrics,
        )
        manual.marshalers.append(marshaler)
        return marshaler, manual.consumer(marshaler)

    old, old_consumer = instance()
    wait_until(lambda: len(old_consumer.claims()) == 2, what="the first instance's claims")
    _new, new_consumer = instance()
    wait_until(lambda: len(new_consumer.claims()) == 2, what="the takeover by the new one")
    assert old.claims() and not [c for c in old.claims() if c.instance_id == old.instance_id]
    series = _one_sample_a_series(_samples(metrics))
    assert series["logmarshal_marshaler_claims_held", (("client_id", "a"), ("group", "g"))] == 2
