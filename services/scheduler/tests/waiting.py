"""Waiting without sleeping blindly: `nexus_events.testing.eventually`, re-exported for the
scheduler's tests."""

from nexus_events.testing import eventually

__all__ = ["eventually"]
