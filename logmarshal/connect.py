"""``connect()``: the one entry point that picks a :class:`~logmarshal.cluster.Cluster`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

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
    client_config: Mapping[str, Any] | None = None,
) -> Cluster:
    """Open a cluster: an embedded data directory, or Kafka brokers at ``bootstrap``.

    ``bootstrap`` is ``"host:port,host:port"``: logmarshal's broker or Apache Kafka, spoken
    to through confluent-kafka (``client_config`` adds librdkafka settings such as TLS).
    With neither argument the embedded directory of :func:`default_data_dir` is used.
    ``clock`` applies to the embedded cluster only (brokers keep their own time).
    """
    if bootstrap is not None:
        if data_dir is not None:
            raise ValueError("give either data_dir or bootstrap, not both")
        from .network import NetworkCluster  # confluent-kafka is loaded only when needed

        return NetworkCluster(bootstrap, config=client_config)
    if client_config is not None:  # (it opened the embedded ./data without a word)
        raise ValueError("client_config is for a cluster at bootstrap: give bootstrap too")
    if data_dir is not None and not os.fspath(data_dir):  # ("" opened the working directory)
        raise ValueError("data_dir is empty: name a directory (or None for the default)")
    return EmbeddedCluster(data_dir if data_dir is not None else default_data_dir(), clock=clock)
