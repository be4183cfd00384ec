"""``python -m nexus_scheduler``: run the scheduler until SIGTERM/SIGINT, then drain."""

from __future__ import annotations

import asyncio

from nexus_events.process import run_service

from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.config import SchedulerSettings


def main() -> None:
    settings = SchedulerSettings()

    async def run(stop: asyncio.Event) -> None:
        app = SchedulerApp(settings)
        await app.start()
        await stop.wait()
        await app.stop()

    run_service("scheduler", run)


if __name__ == "__main__":
    main()
