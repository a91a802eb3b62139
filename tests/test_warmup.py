"""``mechanisms._warmup.warm_up`` compiles every public sampler kernel (numba), so no test or
timed section pays a kernel's compile: checked in a fresh interpreter, where nothing else has
called a kernel yet (in the test process another test may have)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
from mechanisms import _kernels, _table_kernels
from mechanisms._warmup import warm_up

warm_up()
for module in (_kernels, _table_kernels):
    for name in module.__all__:
        kernel = getattr(module, name)
        if hasattr(kernel, "signatures") and not kernel.signatures:
            print(module.__name__ + "." + name)
"""


def test_warm_up_compiles_every_kernel() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, check=True
    )
    assert done.stdout.split() == [], f"kernels warm_up does not call: {done.stdout.split()}"
