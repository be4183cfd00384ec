"""Benchmarks (`make bench`): each figure is printed with its ratio to a same-run baseline."""
