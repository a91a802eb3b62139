"""The whole-tree best linear unbiased estimate (BLUE) and its published error estimates.

Post-processing of the noisy measurements only. May import: `topdown.measurement` (its public
value types), `topdown.support`, the core modules.
"""
