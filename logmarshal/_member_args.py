"""What a member is made of (its cluster, ids and HB), checked at the boundary: shared by
the Marshaler and a streams App, which checks them before it creates any topic."""

from __future__ import annotations

from rationalizer._messages import valid_id

from ._seconds import seconds
from .cluster import Cluster

__all__ = ["check_member_args"]


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
