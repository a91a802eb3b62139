"""What a release publishes beside its counts: microdata, accuracy metrics, the ledger document.

May import: `topdown.measurement`, `topdown.execution`, `topdown.support`, the core modules.
"""
