"""One exception root: every error the library, the log and their tools raise on purpose
derives from :class:`logmarshal.errors.LogmarshalError`, so ``except LogmarshalError``
catches them all (issue "The house": two roots and a streams ``Fenced(Exception)`` before).

The rationalizer is a pure package of its own and keeps its ``ValueError`` family
(``DecodeError``, ``SnapshotError``); private control-flow exceptions (a leading underscore)
and the broker's ``ProtocolError`` (never leaves the broker: the connection is closed) are
not raised to callers."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import logmarshal
import storage
from logmarshal.errors import LogmarshalError

#: raised inside one module and caught there, or never seen by a caller; and the local
#: broker launcher's start error: that module imports only the standard library, so that a
#: bench comparing with a baseline's code can load it without loading this tree's library
_INTERNAL = {"storage.broker.errors.ProtocolError", "logmarshal.localbroker.BrokerStartError"}


def _modules() -> list[str]:
    out = []
    for package in (logmarshal, storage):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith(("__main__", ".job")):
                continue  # entry points: importing one runs it
            out.append(info.name)
    return out


def _errors() -> list[type[BaseException]]:
    found = {}
    for name in _modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, Exception)
                and cls.__module__ == name
                and not cls.__name__.startswith("_")
                and f"{name}.{cls.__name__}" not in _INTERNAL
            ):
                found[f"{name}.{cls.__name__}"] = cls
    return [found[k] for k in sorted(found)]


def test_there_are_errors_to_check() -> None:
    names = {cls.__name__ for cls in _errors()}
    assert {"StorageError", "ClosedError", "CliError", "Fenced", "MirrorError"} <= names


@pytest.mark.parametrize("cls", _errors(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_error_derives_from_the_one_root(cls: type[BaseException]) -> None:
    assert issubclass(cls, LogmarshalError), [c.__name__ for c in cls.__mro__]
