"""The CLI against a real dev stack with the real runner and the offline model.

The order matters a little: the catalog is applied first, the core restart comes last but one,
and the board is checked after all the runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from nexus_testing import eventually_blocking

from tests.e2e.conftest import EXAMPLES, RUN_WAIT, Stack
from tests.support import devstack

pytestmark = pytest.mark.timeout(150)

GATEKEEPER = """\
id: gatekeeper
role: custom
description: Runs one shell command, only with a human's approval.
model: {name: offline-approval}
system_prompt: Run the command you are asked to run. [offline-model:approval]
tools: [run_shell]
permissions:
  approval_required_tools: [run_shell]
"""


def _branch_file(repo: Path, branch: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{branch}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _bg(stack: Stack, *args: str) -> str:
    result = stack.nexus("run", *args, "--bg", "-o", "json")
    assert result.code == 0, result.stderr
    run_id: str = result.json()["run_id"]
    return run_id


def _follow_implementer(stack: Stack, task_id: str, repo: Path, run_id: str) -> devstack.Result:
    """`nexus run implementer --follow` on `repo` for `task_id`; it must exit 0."""
    result = stack.nexus(
        "run", "implementer", "--task", task_id, "--repo", str(repo),
        "--run-id", run_id, "--input", "make the tests pass",
        "--follow", "--wait", str(RUN_WAIT), "-o", "json",
        timeout=RUN_WAIT + 30,
    )  # fmt: skip
    assert result.code == 0, result.stdout + result.stderr
    return result


def _approval_id(stack: Stack, run_id: str) -> str:
    events = eventually_blocking(
        lambda: stack.events(run_id),
        lambda evs: any(e["event"] == "approval_requested" for e in evs),
    )
    found: str = next(e for e in events if e["event"] == "approval_requested")["body"][
        "approval_id"
    ]
    return found


@pytest.fixture(scope="module")
def catalog(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> None:
    """examples/skills, examples/agents and the gatekeeper, applied once with the CLI."""
    skills = stack.nexus("skills", "apply", "-f", str(EXAMPLES / "skills"))
    assert skills.code == 0, skills.stderr
    agents = stack.nexus("agents", "apply", "-f", str(EXAMPLES / "agents"))
    assert agents.code == 0, agents.stderr
    gatekeeper = tmp_path_factory.mktemp("agents") / "gatekeeper.yaml"
    gatekeeper.write_text(GATEKEEPER)
    gate = stack.nexus("agents", "apply", "-f", str(gatekeeper))
    assert gate.code == 0, gate.stderr


@pytest.mark.usefixtures("catalog")
def test_apply_the_example_catalog(stack: Stack) -> None:
    assert {"planner", "implementer", "reviewer", "gatekeeper"} <= set(_agent_ids(stack))
    shown = stack.nexus("agents", "show", "implementer")
    assert shown.code == 0
    assert "can_commit: true" in shown.stdout


@pytest.mark.usefixtures("catalog")
def test_run_follow_fixes_the_failing_test_on_a_branch(stack: Stack, demo_repo: Path) -> None:
    task = stack.nexus("task", "create", "Fix calc", "--id", "E2E-FIX")
    assert task.code == 0, task.stderr
    run_id = f"e2e-follow-{uuid.uuid4().hex[:6]}"
    result = _follow_implementer(stack, "E2E-FIX", demo_repo, run_id)
    view = result.json()
    assert view["status"] == "completed"
    assert view["turns"] == 6
    assert view["result"]["tests_passed"] is True
    fixed = _branch_file(demo_repo, f"nexus/{run_id}", "calc.py")
    assert "return a + b" in fixed
    assert "BUG" not in fixed
    # main is untouched: the work is on the run's branch only
    assert "return a - b" in _branch_file(demo_repo, "main", "calc.py")
    stack.remember_processes()


@pytest.mark.usefixtures("catalog")
def test_memory_learns_from_a_run_and_the_next_run_gets_it(stack: Stack, demo_repo: Path) -> None:
    """The dev stack's memory extracts what a finished run learned (the offline model answers
    extraction with the run's summary), `nexus memory search` finds it, and the next run on
    the same repository is prepared with it."""
    task = stack.nexus("task", "create", "Remember how calc is fixed", "--id", "E2E-MEM")
    assert task.code == 0, task.stderr
    first = f"e2e-learn-{uuid.uuid4().hex[:6]}"
    _follow_implementer(stack, "E2E-MEM", demo_repo, first)

    def learned() -> list[dict[str, object]]:
        found = stack.nexus(
            "memory", "search", "fix the failing test", "--scope", f"repo:{demo_repo}",
            "-o", "json",
        )  # fmt: skip
        assert found.code == 0, found.stderr
        items: list[dict[str, object]] = found.json()["items"]
        return [i for i in items if i.get("source_run_id") == first]

    lessons = eventually_blocking(learned, bool, within=RUN_WAIT)
    assert first in str(lessons[0]["text"])  # the offline model names the run it learned from
    second = f"e2e-recall-{uuid.uuid4().hex[:6]}"
    _follow_implementer(stack, "E2E-MEM", demo_repo, second)
    prepared = next(e for e in stack.events(second) if e["event"] == "prepared")
    memory = prepared["body"]["config"]["memory"]
    assert memory["status"] == "ok", memory
    assert lessons[0]["memory_id"] in [i["memory_id"] for i in memory["items"]]
    stack.remember_processes()


# What an operator can publish by hand on the stored subjects core and the scheduler read:
# bodies near max_payload, invalid UTF-8, unknown events, too many or too few tokens.
_POISON_SUBJECTS = (
    "nexus.catalog.v1.agent.poison.applied",
    "nexus.catalog.v1.agent.poison.exploded",
    "nexus.catalog.v1.agent.x.y.applied",
    "nexus.task.v1.POISON.created",
    "nexus.task.v1.POISON.created.extra",
    "nexus.agent.run.v1.poison.turn",
    "nexus.agent.run.v1.poison.heartbeat",
    "nexus.agent.run.v1.poison.exploded",
    "nexus.schedule.v1.poison.defined",
    # Read by nobody else here (no live run, no chat channel): core's poison sweeper.
    "agent.inbox.v1.poison",
    "nexus.channel.v1.poison.in",
)


def _publish_poison(stack: Stack) -> list[tuple[str, int]]:
    import asyncio

    import nats

    bodies = (os.urandom(900 * 1024), b"\xff\xfe not utf-8", b"[1, 2]", b"{}")

    async def burst() -> list[tuple[str, int]]:
        nc = await nats.connect(stack.state()["nats_url"])
        try:
            js = nc.jetstream()
            stored = []
            for subject in _POISON_SUBJECTS:
                for body in bodies:
                    ack = await js.publish(subject, body)
                    stored.append((ack.stream, ack.seq))
            return stored
        finally:
            await nc.close()

    return asyncio.run(burst())


@pytest.mark.usefixtures("catalog")
def test_a_burst_of_poison_stops_nothing(stack: Stack, demo_repo: Path, tmp_path: Path) -> None:
    """Issue 17 as the operator saw it: after a burst of bad messages, agents still apply,
    tasks still show, a run still completes, and no valid event is dead-lettered."""
    poison = _publish_poison(stack)
    agent = tmp_path / "after-poison.yaml"
    agent.write_text(GATEKEEPER.replace("id: gatekeeper", "id: after-poison"))
    applied = stack.nexus("agents", "apply", "-f", str(agent))
    assert applied.code == 0, applied.stderr
    assert stack.nexus("task", "create", "After the poison", "--id", "E2E-POISON").code == 0
    run_id = f"e2e-poison-{uuid.uuid4().hex[:6]}"
    result = _follow_implementer(stack, "E2E-POISON", demo_repo, run_id)
    assert result.json()["status"] == "completed"
    board = stack.nexus("board", "-o", "json").json()["tasks"]
    assert any(t["task_id"] == "E2E-POISON" for t in board)

    letters = stack.nexus("dlq", "ls", "-o", "json").json()["dead_letters"]
    assert not [x for x in letters if run_id in x["subject"]], "a valid event was dead-lettered"
    filed = {(x["stream"], x["stream_seq"]) for x in letters}
    assert set(poison) <= filed, sorted(set(poison) - filed)
    # One letter per stored message, however many consumers rejected it (issue 36).
    per_message = [(x["stream"], x["stream_seq"]) for x in letters]
    assert len(per_message) == len(set(per_message)), "a stored message was filed twice"
    services = stack.nexus("dev", "status", "-o", "json").json()["services"]
    health = {s["name"]: s["health"] for s in services}
    assert health["core"] == "healthy", services
    assert health["scheduler"].startswith("healthy"), services


@pytest.mark.usefixtures("catalog")
def test_bg_then_attach_and_logs(stack: Stack, demo_repo: Path) -> None:
    run_id = _bg(stack, "implementer", "--repo", str(demo_repo), "--input", "fix it")
    stack.until_status(run_id, {"completed", "failed", "cancelled"})
    snap = stack.nexus("attach", run_id, "-o", "json").json()
    assert snap["run"]["status"] == "completed", snap
    assert snap["run"]["result"]["branch"] == f"nexus/{run_id}"
    human = stack.nexus("attach", run_id)
    assert human.code == 0
    assert "calc.py | 2 +-" in human.stdout
    logs = stack.nexus("logs", run_id)
    assert logs.code == 0, logs.stderr
    assert "subtracts instead of adding" in logs.stdout  # the model's streamed text
    ps = stack.nexus("ps", "--all", "-o", "json").json()["runs"]
    assert run_id in [r["run_id"] for r in ps]


@pytest.mark.usefixtures("catalog")
def test_cancel_a_running_run(stack: Stack, demo_repo: Path) -> None:
    run_id = _bg(
        stack, "implementer", "--repo", str(demo_repo), "--input", "[offline-model:slow] wait"
    )
    eventually_blocking(
        lambda: stack.events(run_id),
        lambda evs: any(e["event"] == "tool_called" for e in evs),
        within=RUN_WAIT,
    )
    stack.remember_processes()
    assert run_id in [r["run_id"] for r in stack.nexus("ps", "-o", "json").json()["runs"]]
    cancelled = stack.nexus("cancel", run_id, "--wait", "-o", "json")
    assert cancelled.code == 0, cancelled.stderr
    assert cancelled.json()["status"] == "cancelled"
    again = stack.nexus("cancel", run_id)
    assert again.code == 0
    assert "already ended" in again.stdout


@pytest.mark.usefixtures("catalog")
def test_approve_a_gated_call(stack: Stack) -> None:
    run_id = _bg(stack, "gatekeeper", "--input", "run it")
    approval = _approval_id(stack, run_id)
    assert stack.status(run_id) == "awaiting_approval"
    assert stack.nexus("approve", run_id, "apr-nope").code == 3
    approved = stack.nexus("approve", run_id, approval, "-m", "go ahead")
    assert approved.code == 0, approved.stderr
    stack.until_status(run_id, {"completed"}, within=30)
    snap = stack.nexus("attach", run_id, "-o", "json").json()
    assert snap["run"]["result"]["summary"] == "The approved command ran."
    settled = stack.nexus("deny", run_id, approval)
    assert settled.code == 2
    # issue 30: the loser is told who decided and where.
    assert "is already decided: approve by " in settled.stderr
    assert settled.stderr.rstrip().endswith(" via cli")


@pytest.mark.usefixtures("catalog")
def test_deny_a_gated_call(stack: Stack) -> None:
    run_id = _bg(stack, "gatekeeper", "--input", "run it")
    approval = _approval_id(stack, run_id)
    denied = stack.nexus("deny", run_id, approval, "-m", "not today")
    assert denied.code == 0, denied.stderr
    stack.until_status(run_id, {"completed"}, within=30)
    snap = stack.nexus("attach", run_id, "-o", "json").json()
    assert "not approved" in snap["run"]["result"]["summary"]
    decided = [e for e in stack.events(run_id) if e["event"] == "approval_decided"]
    assert decided[-1]["body"]["decision"] == "denied"


@pytest.mark.usefixtures("catalog")
def test_core_killed_mid_run_is_restarted_and_the_run_completes(
    stack: Stack, demo_repo: Path
) -> None:
    task = stack.nexus("task", "create", "Fix calc despite a crash", "--id", "E2E-CRASH")
    assert task.code == 0, task.stderr
    run_id = _bg(
        stack, "implementer", "--task", "E2E-CRASH", "--repo", str(demo_repo),
        "--input", "[offline-model:steady] fix it",
    )  # fmt: skip
    eventually_blocking(
        lambda: stack.events(run_id),
        lambda evs: any(e["event"] == "tool_called" for e in evs),
        within=RUN_WAIT,
    )
    stack.remember_processes()
    core = stack.state()["services"]["core"]
    os.kill(core["pid"], signal.SIGKILL)
    restarted = eventually_blocking(
        lambda: stack.state()["services"]["core"],
        lambda c: c["restarts"] >= core["restarts"] + 1 and c["state"] == "running",
    )
    assert restarted["pid"] != core["pid"]
    assert restarted["last_exit_code"] == -signal.SIGKILL
    eventually_blocking(
        lambda: stack.nexus("dev", "status").code, lambda code: code == 0, within=60
    )
    stack.remember_processes()
    stack.until_status(run_id, {"completed", "failed"})
    attached = stack.nexus("attach", run_id, "-o", "json")
    assert attached.code == 0, attached.stderr
    snap = attached.json()
    assert snap["run"]["status"] == "completed", snap
    assert "return a + b" in _branch_file(demo_repo, f"nexus/{run_id}", "calc.py")
    status = stack.nexus("dev", "status", "-o", "json").json()
    core_row = next(s for s in status["services"] if s["name"] == "core")
    assert core_row["restarts"] >= 1
    assert core_row["health"] == "healthy"


def test_board_after_runs(stack: Stack) -> None:
    board = stack.nexus("board", "-o", "json")
    assert board.code == 0, board.stderr
    tasks = {t["task_id"]: t for t in board.json()["tasks"]}
    # The board after the module's earlier runs (pytest runs a module's tests in order).
    assert {"E2E-FIX", "E2E-CRASH"} <= tasks.keys(), "run the whole module: needs its runs"
    for task_id in ("E2E-FIX", "E2E-CRASH"):
        task = tasks[task_id]
        assert task["current_run"]["status"] == "completed", task
        assert task["column"] == "review", task
    human = stack.nexus("board")
    assert "E2E-FIX" in human.stdout
    assert "E2E-CRASH" in human.stdout


def _agent_ids(stack: Stack) -> list[str]:
    listed = stack.nexus("agents", "ls", "-o", "json").json()["agents"]
    return [a["definition"]["id"] for a in listed]


def test_bad_input_gives_the_documented_errors(stack: Stack, tmp_path: Path) -> None:
    unknown = stack.nexus("run", "ghost", "--follow", "--wait", "30", "-o", "json", timeout=60)
    assert unknown.code == 1
    view = unknown.json()
    assert (view["status"], view["reason"]) == ("failed", "unknown_agent")

    bad = tmp_path / "bad.yaml"
    bad.write_text("id: broken\nrole: [not, closed\n")
    malformed = stack.nexus("agents", "apply", "-f", str(bad))
    assert malformed.code == 2
    assert malformed.stderr.startswith("error: ")
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("id: broken\nrole: wizard\nmodel: {name: m}\nsystem_prompt: hi\n")
    rejected = stack.nexus("agents", "apply", "-f", str(invalid))
    assert rejected.code == 2
    assert "role" in rejected.stderr
    assert "broken" not in _agent_ids(stack)

    missing = stack.nexus("attach", "run_doesnotexist")
    assert missing.code == 3
    assert missing.stderr.startswith("error: ")
    as_json = stack.nexus("attach", "run_doesnotexist", "-o", "json")
    assert as_json.code == 3
    assert '"code"' in as_json.stderr
    assert stack.nexus("attach", "not a run id").code == 2
    assert stack.nexus("cancel", "run_doesnotexist").code == 3
