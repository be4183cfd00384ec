"""Process-wide tuning for long-running Nexus services."""

from __future__ import annotations

import gc

# Allocations (net) between young-generation collections; Python's default is 700.
DEFAULT_GC_THRESHOLD = 50_000


def tune_gc(threshold: int = DEFAULT_GC_THRESHOLD) -> None:
    """Freeze what startup allocated and make cyclic garbage collection rarer.

    A projection replay allocates millions of short-lived objects (messages, events, rows)
    that reference counting frees; with Python's defaults the collector still ran thousands
    of young and dozens of full collections, each full one walking every live object, and
    took a quarter of the core replay's time. Frozen startup objects (modules, classes,
    settings) are never walked again. Call once, after startup; `threshold` 0 leaves
    Python's defaults alone.
    """
    if threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(threshold, older, oldest)


__all__ = ["DEFAULT_GC_THRESHOLD", "tune_gc"]
