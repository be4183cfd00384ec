"""The `remember` tool's rules without a bus: which scopes a run may write, the id a call
records under, and how the registry offers, judges and gates it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from nats.aio.client import Client
from nexus_events.events import RunConfig
from nexus_events.events.specs import Permissions, ToolGrant

from nexus_runner.errors import ToolError
from nexus_runner.git import Author, Git
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.tools.memory import RunMemory, RunScopes, memory_id_for
from nexus_runner.workspace import Workspace

REPO = "https://github.com/acme/app.git"
RUN = RunScopes(agent_id="implementer", task_id="t-42", repo=REPO)


@pytest.mark.parametrize(
    ("requested", "token"),
    [
        (None, "agent-implementer"),
        ("agent", "agent-implementer"),
        ("task", "task-t-42"),
        ("repo", "repo-github-com-acme-app"),
        ("global", "global"),
        ("agent:implementer", "agent-implementer"),
        ("task:t-42", "task-t-42"),
        (f"repo:{REPO}", "repo-github-com-acme-app"),
        ("repo:github.com/acme/app", "repo-github-com-acme-app"),
        ("agent-implementer", "agent-implementer"),
        (" task ", "task-t-42"),
    ],
)
def test_a_run_may_write_its_own_scopes(requested: str | None, token: str) -> None:
    assert RUN.resolve(requested) == token


@pytest.mark.parametrize(
    "requested",
    [
        "agent:reviewer",
        "agent-reviewer",
        "task:t-43",
        "task-t-43",
        "repo:https://github.com/acme/other.git",
        "repo:app",
    ],
)
def test_another_agents_task_or_repo_scope_is_refused(requested: str) -> None:
    with pytest.raises(ToolError, match="outside this run") as info:
        RUN.resolve(requested)
    assert "agent, task, repo, global" in str(info.value)


@pytest.mark.parametrize("requested", ["team:core", "agent:", "global:x", "everything", "*"])
def test_an_invalid_scope_is_refused_with_the_choices(requested: str) -> None:
    with pytest.raises(ToolError, match="use one of: agent, task, repo, global"):
        RUN.resolve(requested)


def test_a_run_without_task_or_repo_cannot_name_them() -> None:
    run = RunScopes(agent_id="planner")
    assert run.resolve(None) == "agent-planner"
    assert run.resolve("global") == "global"
    for kind in ("task", "repo"):
        with pytest.raises(ToolError, match=f"this run has no {kind}; use one of: agent, global"):
            run.resolve(kind)
    with pytest.raises(ToolError, match="outside this run"):
        run.resolve("task:t-42")


def test_scopes_of_a_run_config() -> None:
    config = RunConfig.model_validate(
        {
            "run_id": "run-1",
            "agent_id": "implementer",
            "task_id": "t-42",
            "repo": REPO,
            "system_prompt": "x",
            "model": {"name": "m"},
        }
    )
    assert RunScopes.of(config) == RUN


def test_memory_id_is_derived_from_run_and_call() -> None:
    first = memory_id_for("run-1", "call_1")
    assert first == memory_id_for("run-1", "call_1")
    assert first != memory_id_for("run-1", "call_2")
    assert first != memory_id_for("run-2", "call_1")
    # No run/call pair can be spelt as another one by moving the separator.
    assert memory_id_for("run-1", "1call") != memory_id_for("run-11", "call")
    assert re.fullmatch(r"mem-[0-9a-f]{20}", first)


def registry(
    root: Path, tools: list[str], permissions: Permissions | None = None, *, memory: bool = True
) -> ToolRegistry:
    ws = Workspace(root)
    ctx = ToolContext(
        workspace=ws,
        git=Git(ws.root, Author("a", "a@x")),
        shell_timeout=10,
        output_cap=1000,
        # Never connected: the registry's judgement must not need a connection.
        memory=RunMemory(Client(), "run-1", RUN, timeout=1) if memory else None,
    )
    return ToolRegistry([ToolGrant(name=t) for t in tools], permissions or Permissions(), ctx)


def offered(reg: ToolRegistry) -> set[str]:
    return {s["function"]["name"] for s in reg.specs()}


def test_remember_is_offered_only_when_granted(tmp_path: Path) -> None:
    assert "remember" not in offered(registry(tmp_path, ["read_file"]))
    reg = registry(tmp_path, ["read_file", "remember"])
    assert "remember" in offered(reg)
    spec = next(s for s in reg.specs() if s["function"]["name"] == "remember")
    assert spec["function"]["parameters"]["required"] == ["text"]
    assert "secret" in spec["function"]["description"]
    not_granted = registry(tmp_path, ["read_file"]).decide("remember", json.dumps({"text": "x"}))
    assert not_granted.action == "refuse"
    assert "not granted" in not_granted.reason


def test_remember_runs_without_approval_unless_the_definition_asks(tmp_path: Path) -> None:
    args = json.dumps({"text": "tests run with make test", "scope": "task"})
    decision = registry(tmp_path, ["remember"]).decide("remember", args, "call_7")
    assert decision.action == "run"
    assert decision.call_id == "call_7"
    gated = registry(tmp_path, ["remember"], Permissions(approval_required_tools=["remember"]))
    assert gated.decide("remember", args).action == "approve"


def test_a_foreign_scope_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    reg = registry(tmp_path, ["remember"])
    decision = reg.decide("remember", json.dumps({"text": "x", "scope": "agent:reviewer"}))
    assert decision.action == "refuse"
    assert "outside this run" in decision.reason
    bad_kind = reg.decide("remember", json.dumps({"text": "x", "kind": "Not A Kind"}))
    assert bad_kind.action == "invalid"
    assert "kind" in bad_kind.reason


async def test_remember_without_a_memory_connection_is_a_tool_error(tmp_path: Path) -> None:
    reg = registry(tmp_path, ["remember"], memory=False)
    decision = reg.decide("remember", json.dumps({"text": "x"}), "call_1")
    assert decision.action == "run"
    outcome = await reg.execute(decision)
    assert not outcome.ok
    assert "memory is unavailable" in outcome.output
