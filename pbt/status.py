"""``python -m pbt.status <workspace> [--watch]``: see :mod:`pbt.tools.status`."""

import sys

from pbt.tools.status import main

if __name__ == "__main__":
    sys.exit(main())
