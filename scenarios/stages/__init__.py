"""Where a scenario runs: one :class:`Stage` abstraction, three implementations.

- ``sim``: :class:`~scenarios.stages.sim.SimStage`, the deterministic simulator (real consumer
  cores and replays, simulated log and clock; waits advance the seeded scheduler);
- ``threads``: :class:`~scenarios.stages.threads.ThreadStage`, members as threads of this
  process on an embedded cluster, faults injected by a wrapper around each one's connection;
- ``processes``: :class:`~scenarios.stages.processes.ProcessStage`, members as processes over
  a broker process on 127.0.0.1, with SIGKILL, SIGSTOP/SIGCONT and SIGTERM.

A stage starts, kills, freezes, thaws, restarts (same client_id, new instance) and closes
members, produces records, and says who holds what (from a replay of the log) and what each
member handed to user code; :class:`Scenario` bodies are written once against it.
"""

from __future__ import annotations

from .base import GroupChecks, Handed, Member, Scenario, Setup, Stage, StageError

__all__ = [
    "GroupChecks",
    "Handed",
    "Member",
    "Scenario",
    "Setup",
    "Stage",
    "StageError",
    "make_stage",
]


def make_stage(kind: str, setup: Setup) -> Stage:
    """A stage of ``kind`` (``sim``, ``threads`` or ``processes``) for one scenario run."""
    if kind == "sim":
        from .sim import SimStage

        return SimStage(setup)
    if kind == "threads":
        from .threads import ThreadStage

        return ThreadStage(setup)
    if kind == "processes":
        from .processes import ProcessStage

        return ProcessStage(setup)
    raise ValueError(f"no stage {kind!r} (sim, threads, processes)")
