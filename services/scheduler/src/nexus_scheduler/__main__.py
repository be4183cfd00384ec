"""``python -m nexus_scheduler``: run the scheduler until SIGTERM/SIGINT, then drain."""

from __future__ import annotations

import asyncio
import signal

from nexus_events.logs import setup_logging
from nexus_events.telemetry import setup_telemetry, shutdown_telemetry

from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.config import SchedulerSettings


async def _serve() -> None:
    app = SchedulerApp(SchedulerSettings())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await app.start()
    await stop.wait()
    await app.stop()


def main() -> None:
    setup_logging("scheduler")
    setup_telemetry("scheduler")
    try:
        asyncio.run(_serve())
    finally:
        shutdown_telemetry()


if __name__ == "__main__":
    main()
