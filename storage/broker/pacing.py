"""Large requests do not hold the broker's one event loop.

Kafka answers requests on a pool of handler threads. Here every handler runs on one asyncio
loop, so one well-formed request of millions of entries (100 MB fits ``max_frame_bytes``)
held every other connection for as long as it took: 12 s for a 24 MB ListOffsets in an
attack on 2026-12-06. So a request over :data:`OFF_LOOP_BYTES` is decoded, checked and its
answer encoded on a thread of its own (pure work on bytes and objects: no broker state),
one such request at a time; and the handlers let the loop serve other connections every
:data:`PACE` entries of a request (:class:`Pace`).
"""

from __future__ import annotations

import asyncio

__all__ = ["OFF_LOOP_BYTES", "PACE", "Pace"]

#: a request frame larger than this is decoded and answered off the event loop
OFF_LOOP_BYTES = 256 * 1024
#: entries of one request handled between two turns of the event loop
PACE = 1024


class Pace:
    """``await pace()`` once per entry of a request: every :data:`PACE`-th call yields to
    the event loop, so the connections waiting are served between slices of it."""

    __slots__ = ("_n",)

    def __init__(self) -> None:
        self._n = 0

    async def __call__(self) -> None:
        self._n += 1
        if not self._n % PACE:
            await asyncio.sleep(0)
