"""Wait for a condition with a deadline instead of sleeping (STYLE.md section 7)."""

from nexus_events.testing import eventually

__all__ = ["eventually"]
