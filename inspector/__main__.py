"""Entry point for ``python -m inspector``."""

import sys

from ._front.cli import main

if __name__ == "__main__":
    sys.exit(main())
