"""``python -m nexus_spend``: load the settings, run the spend service until SIGTERM, drain."""

from __future__ import annotations

from nexus_events.runtime.process import run_service

from nexus_spend.app import SpendApp
from nexus_spend.config import SpendSettings


def main() -> None:
    run_service("spend", SpendSettings, SpendApp, drain_timeout=lambda s: s.drain_timeout)


if __name__ == "__main__":
    main()
