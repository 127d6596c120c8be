"""The scenarios in real processes: a broker process, consumer processes, real signals.

    python -m scenarios.processes failover --seed 7 [--mode amo] [--data-dir D]
    python -m scenarios.failover --processes --seed 7          # the same
    python -m scenarios.processes failover --kafka --seed 7    # over Apache Kafka

``failover``, ``pause``, ``handoff``, ``restart`` and ``rebalance`` are written once for every
stage (:mod:`scenarios.scenario`); here they run on
:class:`~scenarios.stages.process_stage.ProcessStage` (SIGKILL, SIGSTOP/SIGCONT, SIGTERM).
These need real processes and a real broker, each in its own module:

- ``broker-crash`` (:mod:`scenarios.broker_crash`): the broker is SIGKILLed under an acks=all
  load, a torn write is appended, and it restarts on the same data and port;
- ``reset`` (:mod:`scenarios.reset`): ``logmarshal group reset --execute`` while 3 consumers
  run;
- ``zombie`` (:mod:`scenarios.zombie`, AMO only): the zombie schedule of the simulator
  (:mod:`scenarios.sim`) in real processes: a member frozen past 2·HB, its partition moved,
  its client restarted in a new process, then thawed with its ``__marshal`` fetches lagging;
- ``multi-broker`` (:mod:`scenarios.multi_broker`): 3 brokers, the one leading some
  ``__marshal`` partitions is SIGKILLed;
- ``upgrade`` (:mod:`scenarios.upgrade`, written once for every stage): members capped at
  protocol version 4, then 5, then 6, by two rolling restarts while records are produced.

This module is only the list of them and its command line; the harness they run on is
:mod:`scenarios.process_harness`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from . import (
    broker_crash,
    failover,
    handoff,
    multi_broker,
    pause,
    rebalance,
    reset,
    restart,
    upgrade,
    zombie,
)
from .common import OnKafka, Report, main_on_processes, mode_for
from .scenario import Scenario

__all__ = ["NOT_ON_KAFKA", "SCENARIOS", "main", "run"]


def _on_processes(scenario: Scenario) -> Callable[..., Report]:
    def run(
        seed: int, *, mode: str, data_dir: str | None = None, kafka: OnKafka | None = None
    ) -> Report:
        return scenario.run(seed, mode=mode, stage="processes", data_dir=data_dir, kafka=kafka)

    return run


#: every scenario that runs in real processes: those written once for every stage, and
#: those only real processes can play (a broker's crash, several brokers, the admin CLI)
SCENARIOS: dict[str, Callable[..., Report]] = {
    "failover": _on_processes(failover.SCENARIO),
    "pause": _on_processes(pause.SCENARIO),
    "handoff": _on_processes(handoff.SCENARIO),
    "restart": _on_processes(restart.SCENARIO),
    "rebalance": _on_processes(rebalance.SCENARIO),
    "zombie": _on_processes(zombie.SCENARIO),
    "upgrade": _on_processes(upgrade.SCENARIO),
    "broker-crash": broker_crash.run,
    "reset": reset.run,
    "multi-broker": multi_broker.run,
}

#: the scenarios that cannot run on Apache Kafka, and why (``--kafka`` skips them, saying so)
NOT_ON_KAFKA: dict[str, str] = {"multi-broker": multi_broker.NOT_ON_KAFKA}


def run(
    name: str,
    seed: int,
    *,
    mode: str | None = None,
    data_dir: str | None = None,
    kafka: OnKafka | None = None,
) -> Report:
    """One scenario run; ``kafka``: over Apache Kafka (see :class:`OnKafka`)."""
    if kafka is not None and name in NOT_ON_KAFKA:
        raise ValueError(f"{name} does not run on Apache Kafka: {NOT_ON_KAFKA[name]}")
    extra = {} if kafka is None else {"kafka": kafka}
    return SCENARIOS[name](seed, mode=mode_for(seed, mode), data_dir=data_dir, **extra)


def main(argv: list[str] | None = None) -> int:
    return main_on_processes("python -m scenarios.processes", argv, SCENARIOS)


if __name__ == "__main__":
    sys.exit(main())
