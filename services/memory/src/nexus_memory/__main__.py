"""``python -m nexus_memory``: load the settings, run memory until SIGTERM/SIGINT, drain, exit."""

from __future__ import annotations

import asyncio

from nexus_events.process import run_service, serve_until

from nexus_memory.app import MemoryApp
from nexus_memory.config import MemorySettings


def main() -> None:
    settings = MemorySettings()

    async def run(stop: asyncio.Event) -> None:
        await serve_until(MemoryApp(settings), stop, settings.drain_timeout)

    run_service("memory", run)


if __name__ == "__main__":
    main()
