"""The audit's output tables, declared once so every engine writes the same columns.

Plain Python (no pyarrow/pyspark import): the pure fold fills rows in this column order,
and the Arrow and Spark layers derive their schemas from it. Columns of kind ``TIME`` hold
log-append milliseconds; writers add a ``<name>_time`` UTC timestamp next to each (minus the
``_ms`` suffix) so people reading the Parquet see dates, while programs keep exact integers.
"""

from __future__ import annotations

__all__ = [
    "DERIVED_TABLES",
    "FLOAT",
    "INT",
    "STR",
    "TABLES",
    "TIME",
    "UNION_COLUMNS",
    "column_index",
    "time_column_name",
]

STR = "str"
INT = "int"
FLOAT = "float"
TIME = "time"

#: table name -> ordered (column, kind). Rows produced by the fold follow this order.
TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "ownership": (
        ("group", STR),
        ("topic", STR),
        ("partition", INT),
        ("coord_partition", INT),
        ("client_id", STR),
        ("instance_id", STR),
        ("start_ms", TIME),
        ("start_offset", INT),  # coordination-log offset of the record that started it
        ("start_cause", STR),  # claimed | took_over_stale | restart_takeover
        # data offset the holder resumed from; null when the group had no position (the
        # holder applied its auto_offset_reset; its first heartbeat records where it started)
        ("start_position", INT),
        ("end_ms", TIME),  # null while still open
        ("end_offset", INT),
        ("end_reason", STR),  # released | stale_taken | fenced_new_instance | group_reset | open
        ("end_position", INT),  # resume offset when it ended (or now, if open); null: none
        ("last_seen_ms", TIME),  # the holder's last accepted message
        ("accepted_messages", INT),
        ("hb_ms", INT),
        ("state_at_end", STR),  # open claims: fresh | unknown | stale at the end of the log
    ),
    "failovers": (
        ("group", STR),
        ("topic", STR),
        ("partition", INT),
        ("coord_partition", INT),
        ("from_client", STR),
        ("from_instance", STR),
        ("to_client", STR),
        ("to_instance", STR),
        ("cause", STR),  # released | stale_takeover | restart | group_reset
        ("from_last_seen_ms", TIME),
        ("from_end_ms", TIME),
        ("to_start_ms", TIME),
        ("gap_ms", INT),  # to_start - from_last_seen: nobody was making progress
        ("offset", INT),  # coordination-log offset of the record that gave the new holder its claim
        ("resume_position", INT),  # null when the group had no position
        ("hb_ms", INT),
    ),
    "verdicts": (
        ("group", STR),  # null for records that do not decode
        ("outcome", STR),  # accepted | rejected
        ("reason", STR),  # the Effect of an accepted record, the Reason of a rejected one
        ("records", INT),
    ),
    "violations": (
        ("coord_partition", INT),
        ("offset", INT),
        ("time_ms", TIME),
        ("group", STR),
        ("topic", STR),
        ("partition", INT),
        ("client_id", STR),
        ("instance_id", STR),
        ("message_type", STR),
        ("reason", STR),
        ("kind", STR),
        ("holder_client", STR),  # who held the partition at that moment, per the log
        ("holder_instance", STR),
        ("lost_at_ms", TIME),  # when the sender lost the right to write (claim end / fencing)
    ),
    "heartbeat_gaps": (
        ("group", STR),
        ("topic", STR),
        ("partition", INT),
        ("coord_partition", INT),
        ("client_id", STR),
        ("instance_id", STR),
        ("start_ms", TIME),
        ("start_offset", INT),
        ("accepted_messages", INT),
        ("max_gap_ms", INT),
        ("max_gap_end_ms", TIME),
        ("hb_ms", INT),
        ("gap_over_hb", FLOAT),
    ),
    "positions": (
        ("group", STR),
        ("topic", STR),
        ("partition", INT),
        ("coord_partition", INT),
        ("holder_client", STR),
        ("holder_instance", STR),
        ("freshness", STR),  # of the holder at the end of the log; null when unheld
        ("last_offset", INT),
        ("claimed_through", INT),
        ("resume_offset", INT),  # null: no position yet (claimed only; -1/-1 above)
        ("last_beat_ms", TIME),
        ("log_end_offset", INT),  # null when the export could not read it
        # log_end_offset - resume_offset (negative: position beyond the end); null without
        # either
        ("lag", INT),
    ),
    # membership changes (protocol version 2) folded from each group's membership partition:
    # joined | left (LeavingGroup) | expired (last announcement older than 2·HB; time_ms is
    # the first log time it is stale, offset null) | partitions_added (an announcement with
    # a larger partition count than any live member's; detail "topic old->new"). Listed
    # from the start of the replay whatever the window, so moves early in it are explained.
    "membership": (
        ("group", STR),
        ("coord_partition", INT),
        ("time_ms", TIME),
        ("offset", INT),
        ("client_id", STR),
        ("instance_id", STR),
        ("event", STR),
        ("detail", STR),
        ("hb_ms", INT),
    ),
    # every ownership change named by its cause (derived by the driver from ownership and
    # membership, :mod:`.moves`; the rule is written there): one row per partition a client
    # took or gave up
    "moves": (
        ("group", STR),
        ("topic", STR),
        ("partition", INT),
        ("coord_partition", INT),
        ("time_ms", TIME),
        ("offset", INT),  # coordination-log offset of the claim / release (or voiding) record
        ("client_id", STR),
        ("instance_id", STR),
        ("action", STR),  # took | gave_up
        ("counterpart", STR),  # the previous holder (took) / the next one (gave_up)
        # rebalance | failover | restart | admin_reset | closed | claim | handoff | release |
        # unexplained
        ("cause_kind", STR),
        ("cause", STR),  # e.g. "rebalance: member joined (c3)", "failover: holder stale"
        ("trigger_client", STR),  # the member whose membership change caused a rebalance
        ("trigger_ms", TIME),
    ),
    # the fold's world compared with each published snapshot of the audit's key
    # configuration that covers an offset inside the exported log (:mod:`.rewind`)
    "snapshot_checks": (
        ("coord_partition", INT),
        ("snapshot_offset", INT),  # the snapshot record's offset in __marshal_snapshots
        ("covered_offset", INT),  # the __marshal offset the snapshot's world covers
        ("applied_through", INT),  # the replayed world's, when compared (== covered normally)
        ("snapshot_digest", STR),  # SHA-256 of the snapshot's world bytes, hex
        ("replay_digest", STR),  # SHA-256 of the replayed world's bytes there, hex
        ("result", STR),  # matches | world_differs
    ),
    "coordination": (
        ("coord_partition", INT),
        ("records", INT),
        ("first_offset", INT),
        ("last_offset", INT),
        ("first_ms", TIME),
        ("last_ms", TIME),
    ),
}


#: Tables the driver derives from the folded ones (never produced by the fold itself).
DERIVED_TABLES: tuple[str, ...] = ("moves",)


def _union() -> tuple[tuple[str, str], ...]:
    seen: dict[str, str] = {"table": STR}
    for columns in TABLES.values():
        for name, kind in columns:
            # one kind per name across tables, so a single union schema can carry every row
            assert seen.setdefault(name, kind) == kind, name
    return tuple(seen.items())


#: Every table's rows in one schema (the Spark UDF returns one schema): ``table`` + columns.
UNION_COLUMNS: tuple[tuple[str, str], ...] = _union()


def column_index(table: str, column: str) -> int:
    """Position of ``column`` in ``table``'s rows."""
    return [name for name, _ in TABLES[table]].index(column)


def time_column_name(name: str) -> str:
    """``start_ms`` -> ``start_time``: the timestamp column written next to a TIME column."""
    return (name[:-3] if name.endswith("_ms") else name) + "_time"
