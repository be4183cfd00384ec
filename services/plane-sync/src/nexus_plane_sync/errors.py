"""plane-sync's errors.

NexusError (nexus_events)
└── PlaneSyncError
    ├── PlaneUnavailable   Plane cannot be reached or keeps failing (5xx, timeouts, 429):
    │                      the write stays queued and is tried again (a ConnectionError)
    ├── PlaneRejected      Plane refuses the request itself (4xx): never retried
    └── NotReady           a write needs something not known yet (its task's work item)
"""

from __future__ import annotations

from nexus_events.errors import NexusError


class PlaneSyncError(NexusError):
    """Root of plane-sync's errors."""


class PlaneUnavailable(PlaneSyncError, ConnectionError):  # noqa: N818 - a state
    """Plane did not answer usefully after the retries: try again later."""


class PlaneRejected(PlaneSyncError):  # noqa: N818 - reads as a fact
    """Plane answered a 4xx other than a 409 that means "already there"."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Plane answered {status}: {message}")
        self.status = status


class NotReady(PlaneSyncError):  # noqa: N818 - a state, like httpx's errors
    """A write cannot be made yet (e.g. its task is not known): try again shortly."""
