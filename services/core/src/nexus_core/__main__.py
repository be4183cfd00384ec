"""``python -m nexus_core``: load the settings, run core until SIGTERM/SIGINT, drain, exit."""

from __future__ import annotations

import asyncio
import logging
import signal

from nexus_events.telemetry import setup_telemetry

from nexus_core.app import serve
from nexus_core.config import CoreSettings


async def _main() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(CoreSettings(), stop)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    setup_telemetry("core")
    asyncio.run(_main())


if __name__ == "__main__":
    main()
