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

from typing import Any

from .base import GroupChecks, Handed, Member, Scenario, Stage, StageError

__all__ = [
    "GroupChecks",
    "Handed",
    "Member",
    "Scenario",
    "Stage",
    "StageError",
    "make_stage",
]


def make_stage(kind: str, name: str, seed: int, **options: Any) -> Stage:
    """A stage of ``kind`` (``sim``, ``threads`` or ``processes``) for one scenario run;
    ``options``: ``mode``, ``hb``, ``partitions``, ``faults``, ``data_dir``."""
    if kind == "sim":
        from .sim import SimStage

        return SimStage(name, seed, **options)
    if kind == "threads":
        from .threads import ThreadStage

        return ThreadStage(name, seed, **options)
    if kind == "processes":
        from .processes import ProcessStage

        return ProcessStage(name, seed, **options)
    raise ValueError(f"no stage {kind!r} (sim, threads, processes)")
