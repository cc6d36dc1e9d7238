"""Differential tests: worksnap's ignore decisions against real git."""
