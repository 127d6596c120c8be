"""Where a scenario runs: one :class:`~scenarios.stages.base.Stage` abstraction, three
implementations.

- :mod:`~scenarios.stages.base`: the abstraction and what every stage shares (the member
  handle, the record of a hand-out, the checks);
- ``sim``: :class:`~scenarios.stages.sim_stage.SimStage`, members in the deterministic
  simulator (:mod:`scenarios.sim`: real consumer cores and replays, simulated log and clock;
  waits advance the seeded scheduler);
- ``threads``: :class:`~scenarios.stages.thread_stage.ThreadStage`, members as threads of this
  process on an embedded cluster, faults injected by a wrapper around each one's connection;
- ``processes``: :class:`~scenarios.stages.process_stage.ProcessStage`, members as processes
  over a broker process on 127.0.0.1 (the harness of :mod:`scenarios.process_harness`), with
  SIGKILL, SIGSTOP/SIGCONT and SIGTERM.

A stage starts, kills, freezes, thaws, restarts (same client_id, new instance) and closes
members, produces records, and says who holds what (from a replay of the log) and what each
member handed to user code; a :class:`scenarios.scenario.Scenario` body is written once
against it, and :func:`scenarios.scenario.make_stage` picks the stage for a run.

This package's own module imports nothing: importing ``scenarios.stages.base`` (as the
process harness does) must not pull in the stages built on that harness.
"""
