"""Where tasks run: the serial, process-pool and Dask executors, the local cluster, process memory.

Executors run functions they are given; they know nothing of measurement or estimation (a caller
names the modules its tasks need with `preload`). May import: `topdown.support`, `topdown.errors`.
"""
