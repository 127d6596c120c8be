"""Settings as kafka-python takes them: a class's ``DEFAULT_CONFIG`` (name -> default) is the
one list of what it accepts and of each default, so a setting has one name and one default.

An unknown name is refused at once, in one line that lists the known ones: a misspelt setting
silently left at its default would change what a member does without a word. A name that was
renamed still works for a while, with one ``DeprecationWarning`` per use.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["configure"]


def configure(
    owner: str,
    defaults: Mapping[str, object],
    given: Mapping[str, object],
    renamed: Mapping[str, str] | None = None,
    *,
    stacklevel: int = 3,
) -> dict[str, Any]:
    """``defaults`` with ``given`` over it. ``renamed`` maps an old name to its setting's
    name: it is taken as that setting, with a ``DeprecationWarning`` naming the new one
    (``stacklevel`` 3: the line that constructed ``owner``). Raises TypeError, as Python
    does for an unexpected keyword, for a name ``defaults`` and ``renamed`` do not know, and
    for a setting given under both its names."""
    renamed = renamed or {}
    config = dict(defaults)
    for name, value in given.items():
        new = renamed.get(name)
        if new is not None:
            if new in given:
                raise TypeError(f"{owner}: {name} is the old name of {new}: give only {new}")
            warnings.warn(
                f"{owner}({name}=...) is deprecated: the setting is now called {new}",
                DeprecationWarning,
                stacklevel=stacklevel,
            )
            name = new
        elif name not in defaults:
            close = difflib.get_close_matches(name, defaults, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise TypeError(
                f"{owner} has no setting {name!r}{hint}; its settings are "
                + ", ".join(sorted(defaults))
            )
        config[name] = value
    return config
