"""One real dev stack (`nexus dev up` as a process) shared by the CLI's integration tests.

The runner is the stand-in `fake_runner.py` (configured through the scheduler's own
NEXUS_SCHEDULER_LOCAL_COMMAND). Teardown runs `nexus dev down` and fails the run if any
process the stack started is still alive (`tests.support.devstack`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support import devstack
from tests.support.devstack import Result
from typer.testing import CliRunner

from nexus_cli.main import app

FAKE_RUNNER = Path(__file__).with_name("fake_runner.py")


class Stack(devstack.Stack):
    def nexus(self, *args: str) -> Result:  # type: ignore[override]
        """Run the CLI in this process (typer's CliRunner) with the stack's environment."""
        result = CliRunner().invoke(app, list(args), env=self.env, catch_exceptions=False)
        return Result(result.exit_code, result.stdout, result.stderr)


def eventually(probe: Callable[[], Any], check: Callable[[Any], bool], limit: float = 20) -> Any:
    return devstack.eventually(probe, check, limit, interval=0.1)


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("stack")
    runner = json.dumps([sys.executable, str(FAKE_RUNNER)])
    env = devstack.stack_env(tmp, {"NEXUS_SCHEDULER_LOCAL_COMMAND": runner})
    yield from devstack.running(Stack(tmp / ".nexus", tmp, env))
