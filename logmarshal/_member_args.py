"""What a member is made of (its cluster, ids and HB), checked at the boundary: shared by
the Marshaler and a streams App, which checks them before it creates any topic."""

from __future__ import annotations

import random
from collections.abc import Mapping

from rationalizer._messages import valid_id

from ._seconds import seconds
from .clock import Clock
from .cluster import Cluster

__all__ = ["check_marshaler_settings", "check_member_args"]


def check_member_args(
    cluster: object, client_id: object, group_id: object, heartbeat_interval: object
) -> None:
    """What a member is made of, refused at the boundary (TypeError, ValueError) before
    anything is created for it: a streams App checks them before its topics too."""
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a Cluster (logmarshal.connect()), got {cluster!r}")
    if not valid_id(client_id):
        raise ValueError(f"client_id must be a non-empty str, got {client_id!r}")
    if not valid_id(group_id):
        raise ValueError(f"group_id must be a non-empty str, got {group_id!r}")
    hb = seconds("heartbeat_interval", heartbeat_interval, above=0, at_most=3600)  # (nan: no HB)
    if round(hb * 1000) <= 0:
        raise ValueError(
            f"heartbeat_interval must be at least 0.0005 s (it is kept in whole "
            f"milliseconds), got {heartbeat_interval}"
        )


def check_marshaler_settings(config: Mapping[str, object]) -> None:
    """The Marshaler's settings that are not seconds, refused by type before its replay
    starts: a clock without ``time()`` failed in every replay thread while the Marshaler
    was taken; ``truncate="no"`` read as true and deleted the log; ``snapshot_records=2.5``
    published at no record."""
    if not isinstance(config["clock"], Clock):
        raise TypeError(
            f"clock must have time() and monotonic() (logmarshal.clock), got {config['clock']!r}"
        )
    if config["rng"] is not None and not isinstance(config["rng"], random.Random):
        raise TypeError(f"rng must be a random.Random or None, got {config['rng']!r}")
    for name in ("truncate", "restore_snapshots"):
        if not isinstance(config[name], bool):
            raise TypeError(f"{name} must be True or False, got {config[name]!r}")
    records = config["snapshot_records"]
    if records is not None:
        if isinstance(records, bool) or not isinstance(records, int):
            raise TypeError(f"snapshot_records must be an int or None, got {records!r}")
        if records < 1:
            raise ValueError(f"snapshot_records must be positive, got {records}")
    keys = config["admin_keys"]
    if keys is not None and not isinstance(keys, Mapping):
        raise TypeError(f"admin_keys must map group ids to key bytes, got {keys!r}")
