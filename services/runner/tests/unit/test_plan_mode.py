"""Plan mode's tool filtering and state, without a bus: which tools are offered and which
are refused while a run plans, and how a verdict moves it on."""

from __future__ import annotations

from pathlib import Path

from mcp import types as mcp_types
from nexus_events.events.specs import McpServerSpec, Permissions, ToolGrant

from nexus_runner.config import RunnerSettings
from nexus_runner.git import Author, Git
from nexus_runner.plan import (
    EXIT_PLAN_MODE,
    PlanMode,
    PlanVerdict,
    approval_summary,
    invalid_plan,
    lenient_arguments,
    plan_result,
)
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.tools.mcp import McpServer, McpTools
from nexus_runner.workspace import Workspace

ALL = [
    "read_file", "write_file", "edit_file", "list_files", "search_files", "run_shell",
    "git_status", "git_diff", "git_commit", "run_tests", "remember", "delegate", "finish",
]  # fmt: skip


def _mcp(tmp_path: Path) -> McpTools:
    """A server's listing as the MCP client returns it, indexed without starting it."""
    spec = McpServerSpec(name="docs", transport="http", url="http://127.0.0.1:1/mcp", tools=["*"])
    server = McpServer(
        spec, RunnerSettings(llm_api_key="x"), tmp_path, tmp_path, env={}, secrets=[]
    )
    schema = {"type": "object", "properties": {}}
    server.listing = [
        mcp_types.Tool(
            name="lookup",
            input_schema=schema,
            annotations=mcp_types.ToolAnnotations(read_only_hint=True),
        ),
        mcp_types.Tool(
            name="publish",
            input_schema=schema,
            annotations=mcp_types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
        ),
        mcp_types.Tool(name="unannotated", input_schema=schema),
    ]
    tools = McpTools([server])
    tools._index()
    return tools


def _registry(tmp_path: Path, tools: list[str], mcp: McpTools | None = None) -> ToolRegistry:
    ws = Workspace(tmp_path)
    ctx = ToolContext(
        workspace=ws, git=Git(ws.root, Author("a", "a@x")), shell_timeout=10, output_cap=1000
    )
    return ToolRegistry([ToolGrant(name=t) for t in tools], Permissions(), ctx, mcp)


def _names(specs: list[dict[str, object]]) -> list[str]:
    return [s["function"]["name"] for s in specs]  # type: ignore[index]


def test_plan_mode_offers_only_the_granted_read_tools(tmp_path: Path) -> None:
    reg = _registry(tmp_path, ALL)
    assert _names(reg.specs(read_only=True)) == [
        "read_file", "list_files", "search_files", "git_status", "git_diff",
    ]  # fmt: skip
    assert len(reg.specs()) == len(ALL)
    # A read tool the agent is not granted is not offered in plan mode either.
    narrow = _registry(tmp_path, ["write_file", "list_files", "finish"])
    assert _names(narrow.specs(read_only=True)) == ["list_files"]
    assert not narrow.reads("read_file")


def test_only_read_tools_read(tmp_path: Path) -> None:
    reg = _registry(tmp_path, ALL)
    for name in ("read_file", "list_files", "search_files", "git_status", "git_diff"):
        assert reg.reads(name), name
    for name in ("write_file", "edit_file", "run_shell", "git_commit", "run_tests", "remember",
                 "delegate", "finish", EXIT_PLAN_MODE, "no_such_tool"):  # fmt: skip
        assert not reg.reads(name), name


def test_mcp_tools_in_plan_mode_only_when_annotated_read_only(tmp_path: Path) -> None:
    reg = _registry(tmp_path, ["read_file", "finish"], _mcp(tmp_path))
    everything = _names(reg.specs())
    assert everything == [
        "read_file", "finish", "mcp_docs__lookup", "mcp_docs__publish", "mcp_docs__unannotated",
    ]  # fmt: skip
    assert _names(reg.specs(read_only=True)) == ["read_file", "mcp_docs__lookup"]
    assert reg.reads("mcp_docs__lookup")
    assert not reg.reads("mcp_docs__publish")
    assert not reg.reads("mcp_docs__unannotated")
    # A withdrawn server's tools are not offered, read-only or not.
    reg.mcp.servers["docs"].withdrawn = True
    assert _names(reg.specs(read_only=True)) == ["read_file"]
    assert not reg.reads("mcp_docs__lookup")


def _verdict(decision: str) -> PlanVerdict:
    return PlanVerdict("1. do it", decision, "apr-1", "ann", "why not", "cli")  # type: ignore[arg-type]


def test_an_approved_plan_lifts_plan_mode_at_the_next_turn() -> None:
    plan = PlanMode(active=True)
    assert _names(plan.specs()) == [EXIT_PLAN_MODE]
    plan.record(_verdict("approved"))
    assert plan.active  # the rest of this turn is still judged in plan mode
    assert plan.ended is None
    plan.next_turn()
    assert not plan.active
    assert plan.specs() == []
    assert PlanMode(active=False).specs() == []


def test_a_plan_not_approved_ends_the_run_with_the_plan_as_result() -> None:
    for decision in ("denied", "expired"):
        plan = PlanMode(active=True)
        plan.record(_verdict(decision))
        plan.next_turn()
        assert plan.active
        ended = plan.ended
        assert ended is not None
        result = plan_result(ended)
        assert result.summary == "1. do it"
        assert result.details == {
            "plan": {
                "approved": False,
                "decision": decision,
                "approval_id": "apr-1",
                "decided_by": "ann",
                "comment": "why not",
                "surface": "cli",
            }
        }
        assert result.pushed is False
        assert result.commits == []


def test_exit_plan_mode_arguments() -> None:
    assert invalid_plan({"plan": "1. x"}) is None
    assert invalid_plan({}) == "invalid arguments: plan: Field required"
    assert invalid_plan({"plan": ""}) is not None
    assert invalid_plan({"plan": "x", "extra": 1}) is not None
    assert lenient_arguments('{"path": "a"}') == {"path": "a"}
    assert lenient_arguments("not json") == {"arguments": "not json"}
    assert lenient_arguments("[1]") == {"arguments": "[1]"}
    assert lenient_arguments("") == {}


def test_the_approval_summary_is_the_plan_redacted_and_cut() -> None:
    key = "AKIA" + "ABCDEFGHIJKLMNOP"
    summary = approval_summary(f"1. use {key}\n" + "x" * 10_000)
    assert key not in summary
    assert len(summary) < 3_200
