"""``python -m launcher.run ...`` from a checkout: the same as ``pbt-launch ...`` (:mod:`pbt.launcher.run`)."""

import sys

from pbt.launcher.run import main

if __name__ == "__main__":
    sys.exit(main())
