"""The consumer's decisions without threads, I/O or a clock (docs/architecture.md, "Consumer core").

A :class:`MemberCore` is fed events (time is T, replay reached offset O, a write returned O or
failed, a fetch returned records, user code polls) and answers with actions (write this
record, fetch from there, hand out these records, stop handing out that partition). The
deterministic simulator (``scenarios.sim``) drives it from a seeded scheduler; the threaded
:class:`logmarshal.Consumer` drives it from its threads.
"""

from .actions import (
    Action,
    Assigned,
    CatchUp,
    Closed,
    Fetch,
    HandOut,
    LookUp,
    NoStart,
    Revoke,
    Write,
)
from .events import (
    Bounds,
    Close,
    Event,
    Fetched,
    Halted,
    LogEnds,
    OutOfRange,
    Poll,
    Replayed,
    Resumed,
    Tick,
    Topics,
    WriteFailed,
    Written,
)
from .held import Lease
from .member import MemberCore
from .options import CoreOptions
from .rewind import Regained

__all__ = [
    "Action",
    "Assigned",
    "Bounds",
    "CatchUp",
    "Close",
    "Closed",
    "CoreOptions",
    "Event",
    "Fetch",
    "Fetched",
    "Halted",
    "HandOut",
    "Lease",
    "LogEnds",
    "LookUp",
    "MemberCore",
    "NoStart",
    "OutOfRange",
    "Poll",
    "Regained",
    "Replayed",
    "Resumed",
    "Revoke",
    "Tick",
    "Topics",
    "Write",
    "WriteFailed",
    "Written",
]
