"""Level-batched passes: every family of a level solved at once, in chunks on the executor.

Used by `topdown.estimation.estimate` when a level qualifies (`level.batch_level`). May import the
rest of `topdown.estimation` below `estimate`, and what it may import.
"""
