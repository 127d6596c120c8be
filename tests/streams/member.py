"""A word-count member process for the SIGKILL test:
``python -m tests.streams.member DATA_DIR CLIENT_ID STATE_DIR``. Prints one line per commit."""

from __future__ import annotations

import sys
import time

from logmarshal import EmbeddedCluster
from logmarshal.streams import App, Processor, StoreSpec, Topology
from logmarshal.streams.serde import string_deserializer


class CountEveryUpdate(Processor):
    """Counts words per task and forwards every new count as (word, [partition, count])."""

    delay = 0.0

    def init(self, context):
        super().init(context)
        self.store = context.get_state_store("counts")

    def process(self, record):
        if self.delay:
            time.sleep(self.delay)
        for word in record.value.split():
            n = (self.store.get(word) or 0) + 1
            self.store.put(word, n)
            self.context.forward(word, [self.context.partition, n])


def topology(delay: float = 0.0) -> Topology:
    CountEveryUpdate.delay = delay
    t = Topology().add_source("lines", "lines", value_deserializer=string_deserializer)
    t.add_processor("count", CountEveryUpdate, "lines")
    t.add_state_store(StoreSpec("counts", "sqlite"), "count")
    t.add_sink("out", "counts-out", "count")
    return t


def main() -> None:
    data_dir, client_id, state_dir = sys.argv[1:4]
    with EmbeddedCluster(data_dir, maintenance_interval=0) as cluster:
        app = App(cluster, "wc", topology(delay=0.0005), client_id=client_id,
                  heartbeat_interval=0.3, state_dir=state_dir, commit_interval=0.05)
        original = app.commit

        def commit() -> None:
            original()
            print("committed", flush=True)

        app.commit = commit  # type: ignore[method-assign]
        app.run()


if __name__ == "__main__":
    main()
