"""``python -m nexus_channel_gateway``: load the settings, run until SIGTERM/SIGINT, drain."""

from __future__ import annotations

import asyncio
import signal

from nexus_events.logs import setup_logging
from nexus_events.telemetry import setup_telemetry, shutdown_telemetry

from nexus_channel_gateway.app import SOURCE, serve
from nexus_channel_gateway.config import GatewaySettings


async def _main(settings: GatewaySettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)


def main() -> None:
    setup_logging(SOURCE)
    settings = GatewaySettings()
    setup_telemetry(SOURCE)
    try:
        asyncio.run(_main(settings))
    finally:
        shutdown_telemetry()  # export the buffered spans before the process ends


if __name__ == "__main__":
    main()
