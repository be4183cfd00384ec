"""``python -m nexus_lab``: load the settings, run the lab until SIGTERM, drain."""

from __future__ import annotations

from nexus_events.runtime.process import run_service

from nexus_lab.app import LabApp
from nexus_lab.config import LabSettings


def main() -> None:
    run_service("lab", LabSettings, LabApp, drain_timeout=lambda s: s.drain_timeout)


if __name__ == "__main__":
    main()
