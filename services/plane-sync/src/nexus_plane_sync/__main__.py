"""``python -m nexus_plane_sync``: load the settings, run until SIGTERM/SIGINT, drain, exit."""

from __future__ import annotations

import asyncio

from nexus_events.process import run_service, serve_until

from nexus_plane_sync.app import PlaneSyncApp
from nexus_plane_sync.config import PlaneSyncSettings


def main() -> None:
    settings = PlaneSyncSettings()  # required fields come from the environment

    async def run(stop: asyncio.Event) -> None:
        await serve_until(PlaneSyncApp(settings), stop, settings.drain_timeout)

    run_service("plane-sync", run)


if __name__ == "__main__":
    main()
