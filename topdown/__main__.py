"""``python -m topdown``: the command line (see ``topdown.cli``)."""

import sys

from topdown.cli import main

if __name__ == "__main__":
    sys.exit(main())
