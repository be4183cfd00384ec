"""``python -m nexus_memory``: load the settings, run memory until SIGTERM/SIGINT, drain, exit."""

from __future__ import annotations

import asyncio
import signal

from nexus_events.logs import setup_logging
from nexus_events.telemetry import setup_telemetry, shutdown_telemetry

from nexus_memory.app import serve
from nexus_memory.config import MemorySettings


async def _main(settings: MemorySettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)


def main() -> None:
    setup_logging("memory")
    settings = MemorySettings()
    setup_telemetry("memory")
    try:
        asyncio.run(_main(settings))
    finally:
        shutdown_telemetry()  # export the buffered spans before the process ends


if __name__ == "__main__":
    main()
