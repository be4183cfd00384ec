"""``python -m nexus_console``: load the settings, serve until SIGTERM/SIGINT, drain, exit."""

from __future__ import annotations

from nexus_events.runtime.process import run_service

from nexus_console.app import ConsoleApp
from nexus_console.config import ConsoleSettings


def main() -> None:
    run_service("console", ConsoleSettings, ConsoleApp, drain_timeout=lambda s: s.drain_timeout)


if __name__ == "__main__":
    main()
