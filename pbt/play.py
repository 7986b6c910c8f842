"""``python -m pbt.play checkpoint=<path> task=... [episodes=K]``: see :mod:`pbt.tools.play`."""

from pbt.tools.play import main

if __name__ == "__main__":
    main()
