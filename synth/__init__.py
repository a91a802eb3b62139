"""Simpler generators run as flat, one-level trees (planned; no generator is implemented yet).

DESIGN.md places the class-conditional (naive-Bayes) synthesizer, noisy crosstabs, PrivBayes
and DP2-Pub here, built on the engine's measure/estimate framework. Until their issue lands this
package only reserves the name, so that ``import synth`` fails loudly on nothing.
"""

__all__: list[str] = []
