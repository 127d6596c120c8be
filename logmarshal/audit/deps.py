"""Lazy imports of the audit's optional dependencies (the ``spark`` extra).

The core library never needs pyarrow, pyspark or matplotlib; only the audit does. Importing
them here, on first use, keeps ``import logmarshal`` light and turns a missing package into
one actionable message instead of a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingDependency", "require"]

_HINT = (
    "the audit needs the 'spark' extra: pip install 'logmarshal[spark]' "
    "(from a checkout: pip install -e '.[spark]')"
)


class MissingDependency(ImportError):
    """An optional package of the ``spark`` extra is not installed."""


def require(module: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependency` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(f"{module} is not installed; {_HINT}") from exc
