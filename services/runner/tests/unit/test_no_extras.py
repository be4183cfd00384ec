"""The runner installs nexus-events without extras (services/runner/pyproject.toml): it must
import and start without asyncpg, FastStream, Prometheus, YAML or aiohttp."""

from __future__ import annotations

import os
import subprocess
import sys

# Top-level packages that only nexus-events' extras bring.
EXTRAS_ONLY = ("asyncpg", "faststream", "fast_depends", "yaml", "prometheus_client", "aiohttp")

PROBE = f"""
import sys

class Absent:
    # As if the package were not installed.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRAS_ONLY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None

sys.meta_path.insert(0, Absent())
import nexus_events
import nexus_runner.__main__
import nexus_runner.app
from nexus_runner.config import RunnerSettings

RunnerSettings()
print("imported")
"""


def test_the_runner_imports_without_the_extras():
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
