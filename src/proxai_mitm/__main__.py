"""``python -m proxai_mitm``: the ``proxai`` command (cli.py), e.g. ``python -m proxai_mitm report flows/``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
