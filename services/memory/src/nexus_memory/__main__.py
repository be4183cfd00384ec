"""``python -m nexus_memory``: load the settings, run memory until SIGTERM/SIGINT, drain, exit."""

from __future__ import annotations

from nexus_events.runtime.process import run_service

from nexus_memory.app import MemoryApp
from nexus_memory.config import MemorySettings


def main() -> None:
    run_service("memory", MemorySettings, MemoryApp, drain_timeout=lambda s: s.drain_timeout)


if __name__ == "__main__":
    main()
