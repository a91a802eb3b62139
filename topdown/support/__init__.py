"""Support shared by every layer: optional extras, integer types, row blocks, progress, timing.

Holds small helpers with no knowledge of releases. May import: numpy, the standard library and
`topdown.errors`; nothing else of `topdown`.
"""
