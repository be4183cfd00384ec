"""``python -m nexus_scheduler``: run the scheduler until SIGTERM/SIGINT, then drain."""

from __future__ import annotations

from nexus_events.process import run_service

from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.config import SchedulerSettings


def main() -> None:
    # No outer bound on the drain: SchedulerApp bounds its own (drain_timeout_seconds).
    run_service("scheduler", SchedulerSettings, SchedulerApp)


if __name__ == "__main__":
    main()
