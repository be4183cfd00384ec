"""The CLI against a real `nexus dev up` stack, driven as a user would (real processes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import nats
import nats.js.errors
from nexus_channel_gateway.delegation import child_run_id
from nexus_testing import eventually_blocking

from .conftest import Stack

AGENT_YAML = """\
id: implementer
role: implementer
model: {name: test-model}
system_prompt: You implement tasks.
skills: [python]
tools: [read_file]
"""
SKILL_MD = "---\nversion: 1.0.0\ndescription: Python habits\n---\n# Python\nUse uv.\n"


def _apply_examples(stack: Stack, tmp_path: Path) -> None:
    (tmp_path / "skills").mkdir(exist_ok=True)
    (tmp_path / "skills" / "python.md").write_text(SKILL_MD)
    (tmp_path / "agents").mkdir(exist_ok=True)
    (tmp_path / "agents" / "implementer.yaml").write_text(AGENT_YAML)
    skills = stack.nexus("skills", "apply", "-f", str(tmp_path / "skills"))
    assert skills.code == 0, skills.stderr
    agents = stack.nexus("agents", "apply", "-f", str(tmp_path / "agents"))
    assert agents.code == 0, agents.stderr


def _status(stack: Stack, run_id: str) -> str:
    result = stack.nexus("attach", run_id, "-o", "json")
    return result.json()["run"]["status"] if result.code == 0 else f"exit {result.code}"


def test_up_again_is_idempotent_and_status_is_healthy(stack: Stack) -> None:
    before = stack.state()["supervisor"]["pid"]
    again = stack.process("dev", "up")
    assert again.code == 0, again.stderr
    assert "already up" in again.stdout
    assert stack.state()["supervisor"]["pid"] == before
    status = stack.nexus("dev", "status", "-o", "json")
    assert status.code == 0, status.stderr
    health = {s["name"]: s["health"] for s in status.json()["services"]}
    assert health == {
        "nats": "healthy",
        "postgres": "healthy",
        "core": "healthy",
        "memory": "healthy",
        "scheduler": "healthy (leader)",
        "flows": "healthy",
        "channel-gateway": "healthy",  # every dev stack runs it: delegation
        "console": "healthy",
        "lab": "healthy",
        "spend": "healthy",
    }


def test_agents_and_skills_apply_ls_show_history(stack: Stack, tmp_path: Path) -> None:
    _apply_examples(stack, tmp_path)
    agents = stack.nexus("agents", "ls", "-o", "json").json()["agents"]
    assert [a["definition"]["id"] for a in agents] == ["implementer"]
    shown = stack.nexus("agents", "show", "implementer")
    assert shown.code == 0
    assert "system_prompt: You implement tasks." in shown.stdout
    history = stack.nexus("agents", "history", "implementer", "-o", "json").json()["history"]
    assert history[0]["event"] == "applied"
    skill = stack.nexus("skills", "show", "python")
    assert skill.code == 0
    assert "# Python" in skill.stdout
    assert [
        s["skill"]["name"] for s in stack.nexus("skills", "ls", "-o", "json").json()["skills"]
    ] == ["python"]


def test_malformed_agent_yaml_exits_2_with_the_field_and_publishes_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    (tmp_path / "broken.yaml").write_text("id: broken\nrole: implementer\nmodel: {name: m}\n")
    (tmp_path / "garbage.yaml").write_text("id: [unclosed\n")
    result = stack.nexus("agents", "apply", "-f", str(tmp_path))
    assert result.code == 2
    assert "broken.yaml: system_prompt: Field required" in result.stderr
    assert "garbage.yaml: (document): not valid YAML" in result.stderr
    assert stack.nexus("agents", "show", "broken").code == 3


def test_run_bg_then_events_attach_logs_ps(stack: Stack, tmp_path: Path) -> None:
    _apply_examples(stack, tmp_path)
    started = stack.nexus("run", "implementer", "--input", "fix it", "--bg")
    assert started.code == 0, started.stderr
    run_id = started.stdout.strip()
    assert run_id.startswith("run_")
    events = stack.process("events", run_id, "-f", "-o", "json")
    assert events.code == 0, events.stderr
    names = [json.loads(line)["event"] for line in events.stdout.splitlines()]
    assert names[0] == "requested"
    assert names[-1] == "completed"
    assert {"prepared", "dispatched", "started", "turn", "tool_called"} <= set(names)
    snap = eventually_blocking(
        lambda: stack.nexus("attach", run_id, "-o", "json").json(),
        lambda s: s["run"]["status"] == "completed",
    )
    assert snap["run"]["result"]["summary"] == "fake run done"
    assert snap["run"]["tokens_in"] == 100
    human = stack.nexus("attach", run_id)
    assert "README | 1 +" in human.stdout
    logs = stack.nexus("logs", run_id)
    assert "agent implementer says hi" in logs.stdout
    ps = stack.nexus("ps", "--all", "-o", "json").json()["runs"]
    assert run_id in [r["run_id"] for r in ps]
    assert run_id not in [r["run_id"] for r in stack.nexus("ps", "-o", "json").json()["runs"]]


def test_run_follow_exits_with_the_outcome(stack: Stack, tmp_path: Path) -> None:
    _apply_examples(stack, tmp_path)
    ok = stack.process("run", "implementer", "-i", "go", "--follow", "-o", "json")
    assert ok.code == 0, ok.stderr
    view = json.loads(ok.stdout)
    assert (view["status"], view["turns"], view["tool_calls"]) == ("completed", 1, 1)
    failed = stack.nexus("run", "implementer", "-i", "fail please", "--follow")
    assert failed.code == 1
    assert "failed (runner_error: told to fail)" in failed.stdout


def test_unknown_agent_is_a_failed_run(stack: Stack) -> None:
    result = stack.nexus("run", "ghost", "--follow", "-o", "json")
    assert result.code == 1
    view = json.loads(result.stdout)
    assert (view["status"], view["reason"]) == ("failed", "unknown_agent")


def test_cancel_a_running_run(stack: Stack, tmp_path: Path) -> None:
    _apply_examples(stack, tmp_path)
    run_id = stack.nexus("run", "implementer", "-i", "hang", "--bg").stdout.strip()
    eventually_blocking(lambda: _status(stack, run_id), lambda s: s == "running")
    assert run_id in [r["run_id"] for r in stack.nexus("ps", "-o", "json").json()["runs"]]
    cancelled = stack.nexus("cancel", run_id, "--wait", "-o", "json")
    assert cancelled.code == 0, cancelled.stderr
    assert cancelled.json()["status"] == "cancelled"
    again = stack.nexus("cancel", run_id)
    assert again.code == 0
    assert "already ended: cancelled" in again.stdout


def test_approve_a_gated_call(stack: Stack, tmp_path: Path) -> None:
    _apply_examples(stack, tmp_path)
    run_id = stack.nexus("run", "implementer", "-i", "needs approval", "--bg").stdout.strip()
    eventually_blocking(lambda: _status(stack, run_id), lambda s: s == "awaiting_approval")
    assert stack.nexus("approve", run_id, "nope").code == 3
    approved = stack.nexus("approve", run_id, "ap1", "-m", "go ahead")
    assert approved.code == 0, approved.stderr
    eventually_blocking(lambda: _status(stack, run_id), lambda s: s == "completed")
    settled = stack.nexus("deny", run_id, "ap1")
    assert settled.code == 2
    assert "already decided: approve by " in settled.stderr
    assert " via cli" in settled.stderr


def test_task_board_and_run_on_a_task(stack: Stack, tmp_path: Path) -> None:
    _apply_examples(stack, tmp_path)
    created = stack.nexus("task", "create", "Fix the failing test", "--id", "T-board")
    assert created.code == 0, created.stderr
    run = stack.nexus("run", "implementer", "--task", "T-board", "-i", "go", "--follow")
    assert run.code == 0, run.stderr

    def board_task() -> dict[str, object] | None:
        tasks = stack.nexus("board", "-o", "json").json()["tasks"]
        return next((t for t in tasks if t["task_id"] == "T-board"), None)

    task = eventually_blocking(
        board_task,
        lambda t: bool(t and t["current_run"] and t["current_run"]["status"] == "completed"),
    )
    assert task["title"] == "Fix the failing test"
    assert "T-board" in stack.nexus("board").stdout
    assert "T-board" in stack.nexus("task", "ls").stdout


def test_unknown_run_id_exits_3(stack: Stack) -> None:
    for args in (
        ("attach", "run_nope"),
        ("cancel", "run_nope"),
        ("logs", "run_nope"),
        ("events", "run_nope"),
        ("events", "run_nope", "-f"),
        ("approve", "run_nope", "ap1"),
    ):
        result = stack.nexus(*args)
        assert result.code == 3, (args, result.stderr)
        assert "no run 'run_nope'" in result.stderr


def test_dead_letters_ls_show_replay(stack: Stack) -> None:
    async def publish_garbage() -> None:
        nc = await nats.connect(stack.state()["nats_url"])
        try:
            await nc.jetstream().publish("nexus.agent.run.v1.run_garbage.requested", b"{not json")
        finally:
            await nc.close()

    asyncio.run(publish_garbage())
    letters = eventually_blocking(
        lambda: stack.nexus("dlq", "ls", "-o", "json").json()["dead_letters"],
        lambda ls: any(x["subject"].endswith("run_garbage.requested") for x in ls),
    )
    seq = next(x["seq"] for x in letters if x["subject"].endswith("run_garbage.requested"))
    shown = stack.nexus("dlq", "show", str(seq))
    assert "{not json" in shown.stdout
    replayed = stack.nexus("dlq", "replay", str(seq), "-o", "json")
    assert replayed.code == 0, replayed.stderr
    assert replayed.json()["stream"] == "NEXUS_RUNS"
    assert stack.nexus("dlq", "show", "999999").code == 3


def test_a_huge_poison_message_is_listed_once_and_replayed_whole(stack: Stack) -> None:
    """A body near max_payload: the consumers that reject it file one truncated letter (no
    more wedged projections; one stored message, one letter, whichever reader met it first),
    `dlq ls` shows it, and replay reads the original."""
    blob = os.urandom(900 * 1024)

    async def publish_huge() -> int:
        nc = await nats.connect(stack.state()["nats_url"])
        try:
            ack = await nc.jetstream().publish("nexus.agent.run.v1.run_huge.heartbeat", blob)
            return ack.seq
        finally:
            await nc.close()

    seq = asyncio.run(publish_huge())

    def mine(ls: list[dict[str, object]]) -> list[dict[str, object]]:
        return [x for x in ls if x["stream_seq"] == seq and x["stream"] == "NEXUS_RUNS"]

    letters = eventually_blocking(
        lambda: mine(stack.nexus("dlq", "ls", "-o", "json").json()["dead_letters"]),
        # core's views and metrics consumers and the scheduler all read NEXUS_RUNS: the
        # first to reject it files the letter, the others' are JetStream duplicates
        lambda ls: len(ls) >= 1,
    )
    assert len(letters) == 1, letters
    assert all(x["body_truncated"] and x["body_size"] == len(blob) for x in letters)
    table = stack.nexus("dlq", "ls")
    assert table.code == 0
    assert f"NEXUS_RUNS:{seq}" in table.stdout
    replayed = stack.nexus("dlq", "replay", str(letters[0]["seq"]), "-o", "json")
    assert replayed.code == 0, replayed.stderr

    async def replayed_body() -> bytes:
        nc = await nats.connect(stack.state()["nats_url"])
        try:
            msg = await nc.jetstream().get_msg("NEXUS_RUNS", replayed.json()["stream_seq"])
            return msg.data or b""
        finally:
            await nc.close()

    assert asyncio.run(replayed_body()) == blob


def test_doctor_and_projections(stack: Stack) -> None:
    doctor = stack.nexus("doctor", "-o", "json")
    assert doctor.code == 0, doctor.stdout
    levels = {c["name"]: c["level"] for c in doctor.json()["checks"]}
    assert levels["nats"] == levels["core"] == levels["scheduler"] == levels["postgresql"] == "ok"
    status = stack.nexus("projections", "status", "-o", "json")
    assert status.code == 0, status.stderr
    assert {r["projection"] for r in status.json()["projections"]} == {"agent_runs", "board"}
    rebuilt = stack.nexus("projections", "rebuild", "agent_runs", "-o", "json")
    assert rebuilt.code == 0, rebuilt.stderr
    assert stack.nexus("projections", "rebuild", "nope").code == 2


def test_a_crashed_service_is_restarted_and_reported(stack: Stack) -> None:
    core_pid = stack.state()["services"]["core"]["pid"]
    os.kill(core_pid, signal.SIGKILL)

    def core() -> dict[str, object]:
        services = stack.nexus("dev", "status", "-o", "json").json()["services"]
        return next(s for s in services if s["name"] == "core")

    entry = eventually_blocking(
        core, lambda c: c["restarts"] >= 1 and c["health"] == "healthy", within=60
    )
    assert entry["last_exit_code"] == -signal.SIGKILL
    assert entry["pid"] != core_pid
    log = stack.nexus("dev", "logs", "core", "-n", "200")
    assert log.code == 0
    assert "core exited with code -9; restart #1" in log.stdout
    # The restarted core answers queries again.
    assert stack.nexus("agents", "ls").code == 0


def test_delegation_works_on_a_plain_stack(stack: Stack) -> None:
    """No chat channel is configured here, yet a route request becomes a child run: the
    gateway (which runs delegation) is part of every dev stack."""
    correlation = "plain-stack-1"
    child = child_run_id(correlation)
    request = {"correlation_id": correlation, "input": "review it", "from_run_id": "run_plain"}

    async def route() -> None:
        nc = await nats.connect(stack.state()["nats_url"])
        try:
            await nc.jetstream().publish("agent.route.v1.reviewer", json.dumps(request).encode())
        finally:
            await nc.close()

    async def requested() -> dict[str, object] | None:
        nc = await nats.connect(stack.state()["nats_url"])
        try:
            msg = await nc.jetstream().get_last_msg(
                "NEXUS_RUNS", f"nexus.agent.run.v1.{child}.requested"
            )
            return dict(json.loads(msg.data or b"{}"))
        except nats.js.errors.NotFoundError:
            return None
        finally:
            await nc.close()

    asyncio.run(route())
    body = eventually_blocking(lambda: asyncio.run(requested()), lambda b: b is not None, within=60)
    assert body["agent_id"] == "reviewer"
    assert body["parent_run_id"] == "run_plain"
    assert body["labels"] == {"correlation_id": correlation, "delegation_depth": "1"}
