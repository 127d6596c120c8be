"""``python -m logmarshal``: the same CLI as the ``logmarshal`` script."""

import sys

from .cli.main import main

sys.exit(main())
