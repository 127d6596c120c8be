"""The packages are installed with their ``py.typed`` marker (PEP 561), so a user's type
checker reads logmarshal's, rationalizer's and storage's own hints instead of ignoring them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TYPED = ("logmarshal", "rationalizer", "storage")


@pytest.mark.parametrize("package", TYPED)
def test_the_marker_is_in_the_tree(package: str) -> None:
    assert (ROOT / package / "py.typed").is_file()


def test_the_build_installs_the_markers(tmp_path: Path) -> None:
    """``build_py`` copies what an install gets: the modules and their package data. A marker
    missing from ``[options.package_data]`` would be left behind here, as by ``pip install``."""
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "logmarshal" / "__init__.py").is_file()  # the build did copy the tree
    missing = [p for p in TYPED if not (tmp_path / p / "py.typed").is_file()]
    assert not missing, f"py.typed not installed for {missing} (setup.cfg [options.package_data])"
