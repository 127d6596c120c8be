"""Running on the Python fallbacks is said, once, at import (a checkout without its built
extensions ran the whole suite on them silently, 2026-12-03)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: imports logmarshal with the named extension modules made unimportable
PROGRAM = """
import importlib.abc, logging, sys
blocked = set(sys.argv[1:])
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in blocked:
            raise ModuleNotFoundError(name)
        return None
sys.meta_path.insert(0, Block())
logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
import logmarshal
"""


def _import_stderr(*blocked: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, *blocked],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_missing_extension_is_named_at_import():
    err = _import_stderr("logmarshal._fastconsume")
    assert "C extensions not built: logmarshal._fastconsume " in err, err
    assert "the Consumer's record conversion" in err
    assert "_fastproduce" not in err


def test_nothing_is_said_when_every_extension_is_built():
    assert "C extensions not built" not in _import_stderr()
