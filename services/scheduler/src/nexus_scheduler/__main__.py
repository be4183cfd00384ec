"""``python -m nexus_scheduler``: run the scheduler until SIGTERM/SIGINT, then drain."""

from __future__ import annotations

import sys

from nexus_events.runtime.process import EXIT_BAD_SETTINGS, run_service

from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.config import SchedulerSettings
from nexus_scheduler.runtime.confinement import ConfinementUnavailableError


def main() -> None:
    # No outer bound on the drain: SchedulerApp bounds its own (drain_timeout_seconds).
    try:
        run_service("scheduler", SchedulerSettings, SchedulerApp)
    except ConfinementUnavailableError as exc:  # NEXUS_CONFINEMENT=on: no unconfined runs
        print(f"scheduler: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_SETTINGS)


if __name__ == "__main__":
    main()
