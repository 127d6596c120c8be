"""``connect()``: the one entry point that picks a :class:`~logmarshal.cluster.Cluster`."""

from __future__ import annotations

import os
from collections.abc import Callable

from .cluster import Cluster
from .embedded import EmbeddedCluster

__all__ = ["DATA_DIR_ENV", "connect", "default_data_dir"]

DATA_DIR_ENV = "LOGMARSHAL_DATA_DIR"


def default_data_dir() -> str:
    """``$LOGMARSHAL_DATA_DIR``, else ``./data``."""
    return os.environ.get(DATA_DIR_ENV) or "data"


def connect(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    bootstrap: str | None = None,
    clock: Callable[[], int] | None = None,
) -> Cluster:
    """Open a cluster: an embedded data directory, or (later) brokers at ``bootstrap``.

    With neither argument the embedded directory of :func:`default_data_dir` is used.
    """
    if bootstrap is not None:
        if data_dir is not None:
            raise ValueError("give either data_dir or bootstrap, not both")
        raise NotImplementedError(
            "network connections (bootstrap=...) arrive with the broker; "
            "use data_dir=... for the embedded cluster"
        )
    return EmbeddedCluster(data_dir if data_dir is not None else default_data_dir(), clock=clock)
