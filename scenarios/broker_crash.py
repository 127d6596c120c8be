"""broker-crash: real processes only; see :mod:`scenarios.processes`.

python -m scenarios.broker_crash --seed 7 [--mode alo|amo] [--data-dir D] [-v]
"""

from __future__ import annotations

import sys

from .processes import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], name="broker-crash"))
