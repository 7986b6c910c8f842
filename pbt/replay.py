"""``python -m pbt.replay <schedule.yaml> task=... [overrides]``: see :mod:`pbt.tools.replay`."""

from pbt.tools.replay import main

if __name__ == "__main__":
    main()
