"""``python -m nexus_core``: load the settings, run core until SIGTERM/SIGINT, drain, exit."""

from __future__ import annotations

from nexus_events.runtime.process import run_service

from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings


def main() -> None:
    run_service(
        "core",
        CoreSettings,
        CoreApp,
        drain_timeout=lambda s: s.drain_timeout,
        gc_threshold=lambda s: s.effective_gc_threshold(),
    )


if __name__ == "__main__":
    main()
