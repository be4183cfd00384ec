"""``python -m nexus_plane_sync``: load the settings, run until SIGTERM/SIGINT, drain, exit."""

from __future__ import annotations

from nexus_events.runtime.process import run_service

from nexus_plane_sync.app import PlaneSyncApp
from nexus_plane_sync.config import PlaneSyncSettings


def main() -> None:
    # Required fields come from the environment: a missing one is one line and exit 2.
    run_service(
        "plane-sync", PlaneSyncSettings, PlaneSyncApp, drain_timeout=lambda s: s.drain_timeout
    )


if __name__ == "__main__":
    main()
