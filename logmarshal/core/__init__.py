"""The consumer's decisions without threads, I/O or a clock (ARCHITECTURE, "Consumer core").

A :class:`MemberCore` is fed events (time is T, replay reached offset O, a write returned O or
failed, a fetch returned records) and answers with actions (write this record, fetch from
there, hand out these messages, stop handing out that partition). The deterministic
simulator (``scenarios.sim``) drives it from a seeded scheduler; a threaded edge can drive
it the same way.
"""

from .actions import Action, Closed, Fetch, HandOut, Revoke, Write
from .events import Close, Event, Fetched, Replayed, Tick, WriteFailed, Written
from .lease import Lease
from .member import MemberCore
from .options import CoreOptions

__all__ = [
    "Action",
    "Close",
    "Closed",
    "CoreOptions",
    "Event",
    "Fetch",
    "Fetched",
    "HandOut",
    "Lease",
    "MemberCore",
    "Replayed",
    "Revoke",
    "Tick",
    "Write",
    "WriteFailed",
    "Written",
]
