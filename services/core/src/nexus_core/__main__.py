"""``python -m nexus_core``: load the settings, run core until SIGTERM/SIGINT, drain, exit."""

from __future__ import annotations

import asyncio

from nexus_events.process import run_service, serve_until, tune_gc

from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings


def main() -> None:
    settings = CoreSettings()
    tune_gc(settings.effective_gc_threshold())

    async def run(stop: asyncio.Event) -> None:
        await serve_until(CoreApp(settings), stop, settings.drain_timeout)

    run_service("core", run)


if __name__ == "__main__":
    main()
