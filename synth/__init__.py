"""Simpler generators run as flat, one-level trees (planned; no generator is implemented yet).

The project's design note (``shared/DESIGN.md`` in the shared folder beside the repository, not
shipped with the package) places the class-conditional (naive-Bayes) synthesizer, noisy
crosstabs, PrivBayes (Zhang et al., SIGMOD 2014) and DP2-Pub here, built on the engine's
measure/estimate framework. Until their issue lands this
package only reserves the name, so that ``import synth`` fails loudly on nothing.
"""

__all__: list[str] = []
