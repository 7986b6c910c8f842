"""``python -m pbt.analyze <workspace> --out <dir>``: see :mod:`pbt.tools.analyze`."""

import sys

from pbt.tools.analyze import main

if __name__ == "__main__":
    sys.exit(main())
