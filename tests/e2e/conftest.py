"""The whole stack as a user runs it: `nexus dev up --offline-model` as real processes.

One stack serves the package (starting it is the slow part). Every command goes through the
CLI in a subprocess, as a person would type it; the runner is the real `nexus_runner`, the
model is the offline scripted server (`nexus_cli.devstack.offline_model`), whose script a run
selects with a keyword in its input (`[offline-model:slow]`, ...). Teardown runs
`nexus dev down` and fails if any process the stack started, runners included, is still alive
(`tests.support.devstack`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from nexus_testing import eventually_blocking

from tests.support import devstack

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# A run of the offline model takes a few seconds; a slow CI machine gets some slack.
RUN_WAIT = 90.0


@dataclass
class Stack(devstack.Stack):
    settle: float = 0.2

    def stack_pids(self) -> dict[str, int]:
        """The supervisor, every service and every runner (a process working in a run's dir)."""
        pids = super().stack_pids()
        runs = str((self.home / "runs").resolve())
        for proc in psutil.process_iter(["cwd"]):
            cwd = proc.info.get("cwd") or ""
            if cwd.startswith(runs):
                pids[f"runner:{proc.pid}"] = proc.pid
        return pids

    def until_status(self, run_id: str, statuses: set[str], within: float = RUN_WAIT) -> str:
        """Wait until the run's status is one of `statuses` (read in this process: a poll
        through the CLI would cost the stack a second of CPU each); that status."""
        status: str = eventually_blocking(
            lambda: self.status(run_id),
            lambda s: s in statuses,
            within=within,
            what=f"{run_id} {'/'.join(sorted(statuses))}",
        )
        return status


def e2e_env(tmp: Path) -> dict[str, str]:
    """A suite stack's environment in `tmp`: none of the caller's NEXUS_/OPENAI_ settings."""
    # The runner runs the demo repo's tests with `python -m pytest`: this interpreter's.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    # The spend suite's teams: any CLI user is a member (docs/spend.md, "Teams").
    teams = json.dumps({"spend-ten": ["nats:*"], "spend-deny": ["nats:*"]})
    extra = {
        "PATH": path,
        "NEXUS_HEARTBEAT_INTERVAL": "2",
        "NEXUS_TEAMS": teams,
        # A run waiting on a budget (or on the spend service) asks again every second.
        "NEXUS_BUDGET_RETRY_SECONDS": "1",
        "NEXUS_BUDGET_RECHECK_SECONDS": "1",
    }
    return devstack.stack_env(tmp, extra, drop=("NEXUS_", "OPENAI_"))


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("e2e")
    env = e2e_env(tmp)

    def offline(up: devstack.Result) -> None:
        assert up.json()["offline_model"] is True

    s = Stack(tmp / ".nexus", tmp, env)
    yield from devstack.running(s, "--offline-model", check_up=offline)


@pytest.fixture
def demo_repo(tmp_path: Path) -> Path:
    """A fresh git repository with examples/demo-repo's content (its test fails)."""
    repo = tmp_path / "demo-repo"
    shutil.copytree(EXAMPLES / "demo-repo", repo)
    git = ["git", "-C", str(repo), "-c", "user.name=e2e", "-c", "user.email=e2e@nexus.local"]
    subprocess.run([*git, "init", "--quiet", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "calc"], check=True)
    return repo
