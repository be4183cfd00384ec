"""The scheduler installs nexus-events with the health and metrics extras only
(services/scheduler/pyproject.toml): it must import without asyncpg, FastStream, YAML or CEL.
Its image has none of them; `make compose-test` found the scheduler crashing at import once
it campaigned through `runtime.leadership`, which then imported the PostgreSQL projections."""

from __future__ import annotations

import os
import subprocess
import sys

# Top-level packages that only the extras the scheduler does not install bring.
NOT_INSTALLED = ("asyncpg", "faststream", "fast_depends", "yaml", "celpy")

PROBE = f"""
import sys

class Absent:
    # As if the package were not installed.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {NOT_INSTALLED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None

sys.meta_path.insert(0, Absent())
import nexus_scheduler.__main__
import nexus_scheduler.app
from nexus_scheduler.config import SchedulerSettings

SchedulerSettings()
print("imported")
"""


def test_the_scheduler_imports_without_the_extras_it_does_not_install() -> None:
    env = {**os.environ, "OTEL_SDK_DISABLED": "true"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "imported"
