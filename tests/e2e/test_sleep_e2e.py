"""Sleep through the whole stack (issue 42, docs/resume.md): an agent applied with the `sleep`
tool runs on the real runner with the offline model's `sleep` script, sleeps for ten minutes,
shows in `nexus ps` with its wake time, holds no runner while it sleeps, is woken with
`nexus run wake`, and goes on from its checkpoint to completion."""

from __future__ import annotations

import psutil
import pytest
from nexus_cli.devstack.offline_model import SLEEP_TEXT, WOKE

from tests.e2e.conftest import Stack

pytestmark = pytest.mark.timeout(150)

SLEEPER = """\
id: sleeper
role: custom
description: Writes a note, waits for CI, reads the note back.
model: {name: offline-sleep}
system_prompt: Wait for CI when you must. [offline-model:sleep] [sleep-seconds:600]
tools: [write_file, read_file, sleep, finish]
"""


def _working_in(stack: Stack, run_id: str) -> list[int]:
    """Processes working in the run's directory (resolved: a warm runner's slot directory,
    where the run's directory points when a warm runner took the run)."""
    run_dir = (stack.home / "runs" / run_id).resolve()
    assert run_dir.is_dir(), run_dir  # the run did start here: the check can find its runner
    return [
        p.pid
        for p in psutil.process_iter(["cwd"])
        if (p.info.get("cwd") or "").startswith(str(run_dir))
    ]


@pytest.fixture(scope="module")
def sleeper(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("agents") / "sleeper.yaml"
    path.write_text(SLEEPER)
    applied = stack.nexus("agents", "apply", "-f", str(path))
    assert applied.code == 0, applied.stderr


@pytest.mark.usefixtures("sleeper")
def test_a_run_sleeps_is_listed_with_its_wake_time_and_wakes_on_nexus_run_wake(
    stack: Stack,
) -> None:
    started = stack.nexus("run", "sleeper", "--input", "check CI", "--bg", "-o", "json")
    assert started.code == 0, started.stderr
    run_id: str = started.json()["run_id"]
    stack.until_status(run_id, {"sleeping"})
    ps = stack.nexus("ps")
    assert ps.code == 0, ps.stderr
    [line] = [row for row in ps.stdout.splitlines() if run_id in row]
    assert "sleeping until" in line
    # No runner holds it: no process works in the run's directory while it sleeps.
    assert not _working_in(stack, run_id)

    woken = stack.nexus("run", "wake", run_id, "--reason", "CI is green")
    assert woken.code == 0, woken.stderr
    stack.until_status(run_id, {"completed"})
    run = stack.nexus("attach", run_id, "-o", "json").json()["run"]
    details = run["result"]["details"]
    assert details["read"] == SLEEP_TEXT  # the workspace came back with the run
    assert details["woke"].startswith(WOKE)
    assert "a wake request" in details["woke"]
    assert "CI is green" in details["woke"]
    assert run["attempt"] == 2
    # Waking what is not asleep is refused on one line.
    again = stack.nexus("run", "wake", run_id)
    assert again.code == 1
    assert "is not sleeping" in again.stderr
