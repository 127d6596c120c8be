"""A scenario written once, the stage it runs on, and its command line.

A :class:`Scenario` is a body written against :class:`~scenarios.stages.base.Stage`;
:func:`make_stage` gives it one of the three stages (the simulator, threads of this process,
real processes). This module sits above the stages, so that none of them needs to know the
scenarios that drive it.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from .common import OnKafka, Report, configure_logging, kafka_from, mode_for, parse_args
from .stages.base import Setup, Stage, StageError
from .stages.process_stage import ProcessStage
from .stages.sim_stage import SimStage
from .stages.thread_stage import NetworkThreadStage, ThreadStage

__all__ = ["Scenario", "main_for", "make_stage"]

#: where a scenario can run, by the name ``--stage`` takes (:data:`scenarios.common.STAGES`)
_STAGE_KINDS: dict[str, Callable[[Setup], Stage]] = {
    "sim": SimStage,
    "threads": ThreadStage,
    "network": NetworkThreadStage,
    "processes": ProcessStage,
}


def make_stage(kind: str, setup: Setup) -> Stage:
    """A stage of ``kind`` (``sim``, ``threads``, ``network`` or ``processes``) for one
    scenario run."""
    try:
        stage = _STAGE_KINDS[kind]
    except KeyError:
        raise ValueError(f"no stage {kind!r} (sim, threads, network, processes)") from None
    return stage(setup)


@attrs.frozen
class Scenario:
    """A scenario written once: ``body(stage)`` drives the stage and records its checks."""

    name: str
    body: Callable[[Stage], None]
    partitions: int
    #: heartbeat interval on the real stages, seconds (the simulator has its own, 0.1 s)
    hb: float
    #: "light": some slow, lost and failed calls; "delays": slow calls only
    faults: str = "light"
    #: the one mode it means something in (it wins over the mode asked for); None: by seed
    mode: str | None = None

    def run(
        self,
        seed: int,
        *,
        mode: str | None = None,
        stage: str = "threads",
        data_dir: str | None = None,
        kafka: OnKafka | None = None,
    ) -> Report:
        if kafka is not None and stage != "processes":
            raise ValueError("Apache Kafka is for the processes stage only")
        made = make_stage(
            stage,
            Setup(
                self.name,
                seed,
                mode_for(seed, self.mode or mode),
                self.hb,
                self.partitions,
                faults=self.faults,
                data_dir=data_dir,
                kafka=kafka,
            ),
        )
        try:
            self.body(made)
        except StageError as exc:
            made.report.check("the stage does what the scenario asks", False, str(exc))
        finally:
            made.close()
        return made.report


def main_for(scenario: Scenario, argv: list[str] | None = None) -> int:
    """``python -m scenarios.<name> [--stage S | --processes | --kafka] --seed N``."""
    args = parse_args(scenario.name, argv)
    configure_logging(args.verbose)
    report = scenario.run(
        args.seed,
        mode=args.mode,
        stage=args.stage,
        data_dir=args.data_dir,
        kafka=kafka_from(args),
    )
    report.print()
    if args.data_dir:
        print(f"log kept in {args.data_dir}")
    return 0 if report.ok else 1
