"""Entry point for ``python -m benchmarks.solvers``."""

import sys

from benchmarks.solvers.bench_solvers import main

sys.exit(main())
