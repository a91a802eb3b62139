"""``python -m topdown``: the command line (see ``topdown.product.cli``)."""

from topdown.product.entry import run

if __name__ == "__main__":
    run()
