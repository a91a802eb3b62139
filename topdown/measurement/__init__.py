"""Measurement: everything that reads confidential records.

Reading input files, the tree and its confidential histograms (in memory or on a Dask cluster),
per-query budget checks, the noisy measurements, and the public inputs the estimators take from
them. Nothing after this layer reads confidential data. May import: `topdown.execution`,
`topdown.support`, the core modules (`schema`, `strategy`, `errors`), `mechanisms`, `constraints`.
"""
