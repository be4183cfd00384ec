"""``python -m nexus_plane_sync``: load the settings, run until SIGTERM/SIGINT, drain, exit."""

from __future__ import annotations

import asyncio
import signal

from nexus_events.logs import setup_logging
from nexus_events.telemetry import setup_telemetry, shutdown_telemetry

from nexus_plane_sync.app import serve
from nexus_plane_sync.config import PlaneSyncSettings


async def _main(settings: PlaneSyncSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)


def main() -> None:
    setup_logging("plane-sync")
    settings = PlaneSyncSettings()  # required fields come from the environment
    setup_telemetry("plane-sync")
    try:
        asyncio.run(_main(settings))
    finally:
        shutdown_telemetry()


if __name__ == "__main__":
    main()
