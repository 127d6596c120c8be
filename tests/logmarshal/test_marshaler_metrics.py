"""Marshaler metrics: a scrape of the user's endpoint during a claim race shows them move."""

from __future__ import annotations

import threading
import urllib.request

from prometheus_client import start_http_server
from prometheus_client.parser import text_string_to_metric_families

from logmarshal import _direct as direct
from logmarshal.marshaler import Marshaler
from logmarshal.metrics import MarshalerMetrics
from rationalizer import coordination_partition


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_scrape_shows_verdicts_replay_offsets_lag_and_claims(cluster):
    metrics = MarshalerMetrics()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=metrics.registry)
    port = server.server_address[1]
    a = Marshaler(
        cluster, "a", "g", 5.0, fetch_wait=0.05, coordination_partitions=4, metrics=metrics
    )
    b = Marshaler(cluster, "b", "g", 5.0, fetch_wait=0.05, metrics=metrics)
    try:
        cp = str(coordination_partition("events", 1, 4))
        first = scrape(port)
        assert (
            first[
                (
                    "logmarshal_marshaler_replay_offset",
                    (("client_id", "a"), ("coordination_partition", cp), ("group", "g")),
                )
            ]
            == 0
        )
        assert (
            first[("logmarshal_marshaler_claims_held", (("client_id", "a"), ("group", "g")))] == 0
        )

        assert direct.wait_verdict(a, direct.claim_partition(a, "events", 1), 5).accepted
        assert not direct.wait_verdict(b, direct.claim_partition(b, "events", 1), 5).accepted
        assert direct.wait_verdict(a, direct.heartbeat(a, "events", 1, 9), 5).accepted
        assert a.wait_caught_up(5) and b.wait_caught_up(5)
        after = scrape(port)

        def v(name, **labels):
            return after.get((name, tuple(sorted(labels.items()))), 0.0)

        common = dict(group="g", coordination_partition=cp)
        for who in ("a", "b"):  # both replay the whole partition
            assert (
                v(
                    "logmarshal_marshaler_verdicts_total",
                    client_id=who,
                    outcome="accepted",
                    reason="claimed",
                    **common,
                )
                == 1
            )
            assert (
                v(
                    "logmarshal_marshaler_verdicts_total",
                    client_id=who,
                    outcome="rejected",
                    reason="still_owned",
                    **common,
                )
                == 1
            )
            assert (
                v(
                    "logmarshal_marshaler_verdicts_total",
                    client_id=who,
                    outcome="accepted",
                    reason="renewed",
                    **common,
                )
                == 1
            )
            assert v("logmarshal_marshaler_replay_offset", client_id=who, **common) == 3
            assert v("logmarshal_marshaler_log_end_offset", client_id=who, **common) == 3
            assert (
                "logmarshal_marshaler_replay_lag",
                tuple(sorted(dict(client_id=who, **common).items())),
            ) in after
            assert v("logmarshal_marshaler_replay_lag", client_id=who, **common) == 0
        assert v("logmarshal_marshaler_claims_held", client_id="a", group="g") == 1
        assert v("logmarshal_marshaler_claims_held", client_id="b", group="g") == 0
        b.close()
        gone = scrape(port)
        assert not any(
            k[0] == "logmarshal_marshaler_replay_offset" and ("client_id", "b") in k[1]
            for k in gone
        )
    finally:
        a.close()
        b.close()
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert not [t for t in threading.enumerate() if t.name.startswith("logmarshal-tail")]
