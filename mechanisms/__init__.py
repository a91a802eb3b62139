"""Exact samplers, noise mechanisms, selection mechanisms and privacy accounting."""
