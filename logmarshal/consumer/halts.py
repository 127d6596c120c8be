"""What a Consumer tells its core of halted coordination partitions (:mod:`logmarshal.core.rewind`):
each halt, whether it stops the instance (a gap where any consumer of its Marshaler wrote:
:meth:`Marshaler.lost`), and which partitions an admin's reset determines again after a gap,
each answer naming the gap it answers (a second gap found meanwhile starts it anew)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from .._tailer import Halt
from ..core import Halted, Resumed
from ..core.rewind import supersedes
from ..marshaler import Marshaler

__all__ = ["Halts"]

log = logging.getLogger(__name__)


class Halts:
    """The halted coordination partitions of one Consumer: the replay thread reports them
    (:meth:`halted`), the driver and the replay ask what is regained (:meth:`regained`)."""

    def __init__(self, marshaler: Marshaler, name: str) -> None:
        self._marshaler = marshaler
        self._name = name
        self._lock = threading.Lock()
        #: halted partition -> (the halt the core has, the partitions told as regained)
        self._told: dict[int, tuple[Halt, frozenset[tuple[str, int]]]] = {}

    def __bool__(self) -> bool:
        return bool(self._told)

    def found(self) -> list[Halt]:
        """What a new consumer of the Marshaler must be told first: the halts found before
        it listened, and the gaps that stopped its instance for good."""
        halts = {*self._marshaler.halts().values(), *self._marshaler.lost()}
        return sorted(halts, key=lambda halt: (halt.cp, halt.before))

    def halted(self, halt: Halt) -> Halted:
        """The core's event for ``halt``: live when another consumer of this instance wrote
        there (``Halted.live``). :meth:`told` once the core has it."""
        live = halt in self._marshaler.lost()
        return Halted(halt.cp, halt.before, halt.after, halt.why, live=live)

    def told(self, halt: Halt) -> None:
        """The core has ``halt``: what is regained after it is told from now on, not before
        (a Resumed stepped before its Halted finds nothing halted and is lost; found by an
        attack: a new Consumer's core never regained). The same halt again, or one the
        core's rule says is older (:func:`~logmarshal.core.rewind.supersedes`), changes
        nothing, as in the core."""
        with self._lock:
            known = self._told.get(halt.cp)
            mark = None if known is None else (known[0].why, known[0].before, known[0].after)
            if mark != (halt.why, halt.before, halt.after) and supersedes(
                mark, halt.why, halt.before
            ):
                self._told[halt.cp] = (halt, frozenset())

    def regained(self, cps: Iterable[int] | None = None) -> list[Resumed]:
        """Of the halted ``cps`` (None: all), the partitions the log determines again since
        we last said (an admin reset seen after a gap, its pause over), each naming the gap
        it answers, read with it (:meth:`Marshaler.regained_after`)."""
        out = []
        for cp in list(self._told) if cps is None else cps:
            halted = self._told.get(cp)
            if halted is None:
                continue
            after, keys = self._marshaler.regained_after(cp)
            if halted[0].after != after:
                continue  # a newer halt, not told to the core yet (:meth:`told` comes first)
            if keys - halted[1]:
                with self._lock:
                    if self._told.get(cp) is not halted:
                        continue  # told a newer halt meanwhile: its answers start anew
                    self._told[cp] = (halted[0], keys)
                log.warning(
                    "%s: coordination partition %d: the log determines %s again "
                    "(an admin reset after the halt)",
                    self._name,
                    cp,
                    sorted(keys),
                )
                out.append(Resumed(cp, tuple(sorted(keys)), after=after))
        return out
