"""One coordination partition's replay, as a :class:`~logmarshal._tailer.Tailer` keeps it:
its world, how far it got, what it awaits, and a halt when the log stops being one it can
fold (:class:`Halt`)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import attrs

from rationalizer import WorldState

from .core.rewind import Regained

__all__ = ["Halt", "HaltListener", "Tail"]


@attrs.frozen
class Halt:
    """A coordination partition whose replay is no longer a fold of the log
    (:mod:`logmarshal.core.rewind`): ``rewound`` (the log ends at ``after``, below
    ``before``, where the replay was: its replay is frozen) or ``gap`` (records
    ``before..after-1`` were deleted unseen and no snapshot covers them: the replay goes on
    from ``after``, and :class:`~logmarshal.core.rewind.Regained` says what the log
    determines again)."""

    cp: int
    why: str
    before: int
    after: int


#: ``halted(halt)``: called once per halted coordination partition, from its replay
#: thread, outside the replay's lock
HaltListener = Callable[[Halt], None]


class Tail:
    """One coordination partition: its WorldState and the thread that feeds it."""

    def __init__(self, partition: int, world: WorldState) -> None:
        self.partition = partition
        self.world = world
        self.cond = threading.Condition()
        self.next_offset = 0  # the next log offset to apply
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.skipped_batches = 0  # corrupt stored batches the replay skipped
        # offsets of this tailer's own records not applied yet: the writer of a record at
        # a snapshot point publishes the snapshot (PROTOCOL.md, "Who publishes")
        self.own: set[int] = set()
        # set when a record of ours is awaited: the replay of this partition skips its linger
        self.hurry = threading.Event()
        # the log lost records this replay applied, or never saw (core.rewind); with a gap,
        # what the records after it determine again
        self.halt: Halt | None = None
        self.regained: Regained | None = None
        # the log was unreachable: before applying more, check it still holds what we
        # applied (a broker may come back with less: an unclean leader election, a restore)
        self.suspect = False
        # (offset, timestamp, key, value) of the last record applied, for that check
        self.last: tuple[int, int, bytes | None, bytes | None] | None = None
        # this process's records the replay has not reached: (key, value) by the offset the
        # log acknowledged them at (Tailer.mark_written)
        self.written: dict[int, tuple[bytes, bytes]] = {}
        # the offsets, keys and values of the chunk applied last (a write's answer that comes
        # after the replay applied it is checked against them, without reading the log)
        self.recent: tuple[list[int], list[bytes | None], list[bytes | None]] = ([], [], [])
        # wall ms when this replay's configuration is announced again (None: never)
        self.announce_at: int | None = None
        # wall ms when to look again whether our configuration has snapshots of its own
        # (None: this tailer does not publish)
        self.keep_current_at: int | None = None
        # the last fetch found no backlog: the replay is at (or near) the log end
        self.caught_up = False
