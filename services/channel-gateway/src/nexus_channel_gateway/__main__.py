"""``python -m nexus_channel_gateway``: load the settings, run until SIGTERM/SIGINT, drain."""

from __future__ import annotations

from nexus_events.runtime.process import run_service

from nexus_channel_gateway.app import SOURCE, GatewayApp
from nexus_channel_gateway.config import GatewaySettings


def main() -> None:
    run_service(SOURCE, GatewaySettings, GatewayApp, drain_timeout=lambda s: s.drain_timeout)


if __name__ == "__main__":
    main()
