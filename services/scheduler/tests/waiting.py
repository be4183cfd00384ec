"""Waiting without sleeping blindly: `nexus_testing.eventually`, re-exported for the
scheduler's tests."""

from nexus_testing import eventually

__all__ = ["eventually"]
