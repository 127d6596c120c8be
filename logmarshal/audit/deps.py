"""Lazy imports of the audit's optional dependencies (the ``spark`` extra).

The core library never needs pyarrow, pyspark or matplotlib; only the audit does. Importing
them here, on first use, keeps ``import logmarshal`` light and turns a missing package into
one actionable message instead of a traceback.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
from collections.abc import Iterator
from types import ModuleType

from ..errors import LogmarshalError

__all__ = ["MissingDependency", "fewer_collections", "require"]

_HINT = (
    "the audit needs the 'spark' extra: pip install 'logmarshal[spark]' "
    "(from a checkout: pip install -e '.[spark]')"
)


class MissingDependency(LogmarshalError, ImportError):
    """An optional package of the ``spark`` extra is not installed."""


def require(module: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependency` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(f"{module} is not installed; {_HINT}") from exc


#: inside :func:`fewer_collections`, the cyclic collector runs this many times less often
GC_SLOWDOWN = 100


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the cyclic garbage collector :data:`GC_SLOWDOWN` times less often in the block.

    Why: an audit allocates millions of short-lived objects that form no cycles (rows,
    decoded fields, the rationalizer's cache entries), and each collection walks every
    live container, the replay's caches included: bench/audit.py measured 15% of the
    in-process audit's CPU time at 10 M records in collections. Reference counting frees
    all of it as before; cycles, if any, are still collected, later. The thresholds are
    the interpreter's: they are put back as they were when the block ends.
    """
    before = gc.get_threshold()
    gc.set_threshold(before[0] * GC_SLOWDOWN, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
