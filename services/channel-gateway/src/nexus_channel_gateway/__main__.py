"""``python -m nexus_channel_gateway``: load the settings, run until SIGTERM/SIGINT, drain."""

from __future__ import annotations

import asyncio

from nexus_events.process import run_service, serve_until
from pydantic import ValidationError

from nexus_channel_gateway.app import SOURCE, GatewayApp
from nexus_channel_gateway.config import GatewaySettings, settings_error


def main() -> None:
    try:
        settings = GatewaySettings()
    except ValidationError as exc:  # one line, not a traceback: a person fixes the variable
        raise SystemExit(f"channel-gateway: invalid settings: {settings_error(exc)}") from None

    async def run(stop: asyncio.Event) -> None:
        await serve_until(GatewayApp(settings), stop, settings.drain_timeout)

    run_service(SOURCE, run)


if __name__ == "__main__":
    main()
