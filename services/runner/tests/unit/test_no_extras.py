"""The runner installs nexus-events without extras (services/runner/pyproject.toml): it must
import and start without asyncpg, FastStream, Prometheus, YAML or aiohttp."""

from __future__ import annotations

from nexus_testing.imports import imports_without

# Top-level packages that only nexus-events' extras bring.
EXTRAS_ONLY = ("asyncpg", "faststream", "fast_depends", "yaml", "prometheus_client", "aiohttp")


def test_the_runner_imports_without_the_extras() -> None:
    imports_without(
        EXTRAS_ONLY,
        "import nexus_events\n"
        "import nexus_runner.__main__\n"
        "import nexus_runner.app\n"
        "from nexus_runner.config import RunnerSettings\n"
        "RunnerSettings()",
    )
