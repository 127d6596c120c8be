"""The admin library behind ``logmarshal group`` and ``logmarshal coord dump``.

Library first, CLI thin: everything here works on any :class:`~logmarshal.cluster.Cluster`
and returns values; the CLI only parses arguments and prints.

- :mod:`.reader`: replay all of ``__marshal`` once into worlds, per-partition position
  history and declared leases;
- :mod:`.describe`: groups, members, positions, lag and Burrow-style status (:mod:`.status`);
- :mod:`.reset`: reset plans (pure, or :func:`plan_from_log`), their CSV form, and execution
  through ReleaseGroup (relative targets resolved once the pause has landed);
- :mod:`.keys`: admin key files for authenticated admin records.
"""

from .describe import GroupDescription, GroupSummary, PartitionView, describe_group, list_groups
from .errors import AdminError
from .keys import AdminKeyError, AdminKeys, load_admin_keys, parse_admin_keys
from .reader import CoordinationState, CoordRecord, Sample, read_coordination
from .reset import (
    AdminIdentity,
    Execution,
    Plan,
    PlanRow,
    Target,
    current_positions,
    execute,
    new_admin,
    parse_plan_csv,
    plan_from_log,
    plan_reset,
    plan_to_csv,
    wake_halted,
)
from .status import Status, evaluate_partition

__all__ = [
    "AdminError",
    "AdminIdentity",
    "AdminKeyError",
    "AdminKeys",
    "CoordRecord",
    "CoordinationState",
    "Execution",
    "GroupDescription",
    "GroupSummary",
    "PartitionView",
    "Plan",
    "PlanRow",
    "Sample",
    "Status",
    "Target",
    "current_positions",
    "describe_group",
    "evaluate_partition",
    "execute",
    "list_groups",
    "load_admin_keys",
    "new_admin",
    "parse_admin_keys",
    "parse_plan_csv",
    "plan_from_log",
    "plan_reset",
    "plan_to_csv",
    "read_coordination",
    "wake_halted",
]
