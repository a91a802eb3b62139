"""Solver benchmark suite: TopDown-like instances and a runner comparing every backend."""
