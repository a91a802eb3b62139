"""Streamed releases: memory that follows the largest subtree, not the whole level.

Runs the engine level by level down to a stream level, then each subtree as its own task, reading
its records only there. May import every engine layer below it (`outputs`, `estimation`, `blue`,
`measurement`, `execution`, `support`) and `topdown.release`; never `topdown.product`.
"""
