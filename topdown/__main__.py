"""``python -m topdown``: the command line (see ``topdown.product.cli``)."""

import sys

from topdown.product.cli import main

if __name__ == "__main__":
    sys.exit(main())
