"""``python -m nexus_core``: load the settings, run core until SIGTERM/SIGINT, drain, exit."""

from __future__ import annotations

import asyncio
import signal

from nexus_events.logs import setup_logging
from nexus_events.process import tune_gc
from nexus_events.telemetry import setup_telemetry, shutdown_telemetry

from nexus_core.app import serve
from nexus_core.config import CoreSettings


async def _main(settings: CoreSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)


def main() -> None:
    setup_logging("core")
    settings = CoreSettings()
    setup_telemetry("core")
    tune_gc(settings.effective_gc_threshold())
    try:
        asyncio.run(_main(settings))
    finally:
        shutdown_telemetry()  # export the buffered spans before the process ends


if __name__ == "__main__":
    main()
