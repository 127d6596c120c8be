"""What every CLI command shares: the output mode and a lazily opened cluster."""

from __future__ import annotations

from ..cluster import Cluster
from ..connect import connect, default_data_dir

__all__ = ["CliError", "Context"]


class CliError(Exception):
    """A mistake in how the command was called; printed as one line."""


class Context:
    """``bootstrap`` (brokers) and ``data_dir`` (embedded) exclude each other."""

    def __init__(self, data_dir: str | None, as_json: bool, bootstrap: str | None = None) -> None:
        if bootstrap is not None and data_dir is not None:
            raise CliError(
                "--bootstrap and --data-dir exclude each other: commands use either brokers "
                "or an embedded data directory"
            )
        self.bootstrap = bootstrap
        self.explicit_data_dir = data_dir
        self.data_dir = data_dir or default_data_dir()
        self.as_json = as_json
        self._cluster: Cluster | None = None

    @property
    def cluster(self) -> Cluster:
        """Opened on first use, so commands that need no cluster never lock a directory."""
        if self._cluster is None:
            if self.bootstrap is not None:
                self._cluster = connect(bootstrap=self.bootstrap)
            else:
                self._cluster = connect(self.data_dir)
        return self._cluster

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
