"""A baseline commit's tree beside this one, for the benches that compare with it in the
same run (``--baseline-ref REF``): idle.py, consumer.py, broker_large_requests.py.

The tree comes from ``git archive`` (its code, not this checkout's uncommitted changes),
and its C extensions are built in it from its own sources: copied from this tree instead,
a baseline whose C differs would be timed with this tree's C. Where they cannot be built
(no compiler), this tree's built extensions are copied in, and the run says so.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["extract"]

ROOT = Path(__file__).resolve().parent.parent


def extract(ref: str, bench: str) -> Path:
    """The tree of commit ``ref`` in a new temporary directory (named after ``bench``),
    with its C extensions built."""
    target = Path(tempfile.mkdtemp(prefix=f"bench-{bench}-baseline-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    built = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace", "-q"],
        cwd=target,
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        print(f"the extensions of {ref} could not be built ({built.stderr.strip()[-300:]}); "
              "this tree's are used in it", file=sys.stderr)  # fmt: skip
        for so in ROOT.rglob("*.so"):
            rel = so.relative_to(ROOT)
            if (target / rel.parent).is_dir() and not rel.parts[0].startswith(("build", ".")):
                shutil.copy(so, target / rel)
    return target
