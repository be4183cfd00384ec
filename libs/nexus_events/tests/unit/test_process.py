"""GC tuning: thresholds sized to projection batches, and what tune_gc changes."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from nexus_events.process import DEFAULT_GC_THRESHOLD, gc_threshold_for_batch, tune_gc


@pytest.fixture
def restored_gc() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_threshold_grows_with_the_batch_above_a_floor():
    assert gc_threshold_for_batch(5_000) == 200_000
    assert gc_threshold_for_batch(10_000) == 400_000
    assert gc_threshold_for_batch(100) == DEFAULT_GC_THRESHOLD


def test_tune_gc_sets_the_young_threshold_and_freezes_startup(restored_gc: None):
    older = gc.get_threshold()[1:]
    tune_gc(123_456)
    assert gc.get_threshold() == (123_456, *older)
    assert gc.get_freeze_count() > 0


def test_tune_gc_zero_leaves_python_alone(restored_gc: None):
    before = gc.get_threshold()
    tune_gc(0)
    assert gc.get_threshold() == before
