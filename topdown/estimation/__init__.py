"""Top-down estimation: the passes, families, the root, and the level-batched fast paths.

Post-processing only: public measurements in, non-negative integer consistent counts out. May
import: `topdown.blue`, `topdown.measurement`, `topdown.execution`, `topdown.support`, the core
modules, `solvers`, `constraints`.
"""
