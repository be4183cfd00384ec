"""The scheduler installs nexus-events with the health and metrics extras only
(services/scheduler/pyproject.toml): it must import without asyncpg, FastStream, YAML or CEL.
Its image has none of them; `make compose-test` found the scheduler crashing at import once
it campaigned through `runtime.leadership`, which then imported the PostgreSQL projections."""

from __future__ import annotations

from nexus_testing.imports import imports_without

# Top-level packages that only the extras the scheduler does not install bring.
NOT_INSTALLED = ("asyncpg", "faststream", "fast_depends", "yaml", "celpy")


def test_the_scheduler_imports_without_the_extras_it_does_not_install() -> None:
    imports_without(
        NOT_INSTALLED,
        "import nexus_scheduler.__main__\n"
        "import nexus_scheduler.app\n"
        "from nexus_scheduler.config import SchedulerSettings\n"
        "SchedulerSettings()",
    )
