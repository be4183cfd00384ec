"""``python -m nexus_flows``: load the settings, run the flows service until SIGTERM, drain."""

from __future__ import annotations

from nexus_events.runtime.process import run_service

from nexus_flows.app import FlowsApp
from nexus_flows.config import FlowsSettings


def main() -> None:
    run_service("flows", FlowsSettings, FlowsApp, drain_timeout=lambda s: s.drain_timeout)


if __name__ == "__main__":
    main()
