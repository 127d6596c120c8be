"""The optional C extensions (``setup.py``): whether each is built, and one warning at
import when one is not. Each module falls back to Python code that gives the same results
several times slower, which nothing else would tell a user (an editable install of another
checkout, or a build without a C compiler, runs on the fallbacks silently)."""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger("logmarshal")

#: module: what runs in Python without it
EXTENSIONS = {
    "logmarshal._fastconsume": "the Consumer's record conversion",
    "logmarshal._fastproduce": "the Producer's send path and record encoding",
    "storage._fastrecords": "the broker's record validation",
}


def missing() -> list[str]:
    """The optional extensions that do not import (not built where they are imported from,
    or built for another Python): the modules that use them fall back on ImportError too."""
    absent = []
    for name in EXTENSIONS:
        try:
            importlib.import_module(name)
        except ImportError:
            absent.append(name)
    return absent


def warn_if_missing() -> None:
    """Log, once per import of the package, which extensions run as Python fallbacks."""
    absent = missing()
    if absent:
        log.warning(
            "C extensions not built: %s (slower Python fallbacks for %s); "
            "`pip install -e .` in the checkout builds them",
            ", ".join(absent),
            "; ".join(EXTENSIONS[name] for name in absent),
        )
