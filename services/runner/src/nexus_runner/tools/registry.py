"""Which tools a run may use and how an accepted call runs; `nexus_runner.guard.pipeline`
judges each call (run, refuse, ask a human) before."""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from nexus_events.events import GuardNote
from nexus_events.events.specs import Hooks, Permissions, SandboxTool, ToolGrant

from nexus_runner.errors import ToolError
from nexus_runner.guard import pipeline as guard_pipeline
from nexus_runner.guard.verdict import Decision, Outcome
from nexus_runner.plan import READ_SKILL, READ_TOOLS
from nexus_runner.sandbox import HostEnv, RunSandbox
from nexus_runner.sandbox.hooks import ScriptHooks
from nexus_runner.tools.builtin import BUILTINS
from nexus_runner.tools.context import ToolContext
from nexus_runner.tools.mcp import McpTools

__all__ = ["IDEMPOTENT_TOOLS", "Decision", "ToolContext", "ToolOutcome", "ToolRegistry"]

# Built-ins a resumed attempt may run again when the dead one left them unanswered (docs/
# resume.md): reads; write_file and edit_file, since the workspace was restored to the last
# checkpoint (before them) and the same arguments give the same files; finish, which only
# records the run's result. Not run_shell, run_tests, git_commit, delegate, remember: their
# effect (outside the workspace, or not in a checkpoint) may already have happened.
IDEMPOTENT_TOOLS = READ_TOOLS | {"write_file", "edit_file", "finish"}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolOutcome:
    ok: bool
    output: str
    guard: GuardNote | None = None  # an after_tool_call hook's verdict on the output


def detect_test_command(root: Path) -> str | None:
    """The project's test command, from its files (pytest, npm, cargo, go, make)."""
    if (root / "Makefile").is_file() and re.search(
        r"^test\s*:", (root / "Makefile").read_text(errors="replace"), re.MULTILINE
    ):
        return "make test"
    python_markers = ("pyproject.toml", "setup.py", "setup.cfg", "pytest.ini", "tox.ini")
    if any((root / m).is_file() for m in python_markers) or (root / "tests").is_dir():
        return "python -m pytest -q"
    if (root / "package.json").is_file():
        return "npm test --silent"
    if (root / "Cargo.toml").is_file():
        return "cargo test"
    if (root / "go.mod").is_file():
        return "go test ./..."
    return None


class ToolRegistry:
    """The tools granted to a run: what the model is offered, and how a call runs. Its `guard`
    judges each call against the run's permissions and hooks."""

    def __init__(
        self,
        grants: list[ToolGrant],
        permissions: Permissions,
        context: ToolContext,
        mcp: McpTools | None = None,
        hooks: Hooks | None = None,
        *,
        sandbox_tools: list[SandboxTool] | None = None,
    ) -> None:
        self.granted = {g.name: g for g in grants if g.name in BUILTINS}
        self.unknown = sorted(g.name for g in grants if g.name not in BUILTINS)
        if "finish" not in self.granted:  # every run must be able to end itself
            self.granted["finish"] = ToolGrant(name="finish")
        if context.skills and READ_SKILL not in self.granted:  # how on-demand skills are read
            self.granted[READ_SKILL] = ToolGrant(name=READ_SKILL)
        self.permissions = permissions
        self.ctx = context
        self.mcp = mcp or McpTools([])
        self.hooks = hooks or Hooks()
        self._builtin_specs = self._specs_of_builtins()
        # Sandboxed tools: a name of a built-in or MCP tool, or a schema that is not one,
        # drops the tool (listed in `unknown`), never replaces the other.
        self.sandboxed: dict[str, tuple[SandboxTool, Draft202012Validator]] = {}
        for tool in sandbox_tools or []:
            if tool.name in BUILTINS or tool.name.startswith("mcp_"):
                self.unknown.append(f"{tool.name} (sandboxed: the name is taken)")
                continue
            try:
                Draft202012Validator.check_schema(tool.parameters)
            except SchemaError as exc:
                self.unknown.append(f"{tool.name} (sandboxed: bad parameters: {exc.message})")
                continue
            self.sandboxed[tool.name] = (tool, Draft202012Validator(tool.parameters))
        self._sandbox: RunSandbox | None = None
        self._scripts: ScriptHooks | None = None
        self._env: HostEnv | None = None
        self.guard = guard_pipeline.GuardPipeline(self)

    def _host_env(self) -> HostEnv:
        """What sandboxed code acts on: one per run, shared by its tools and hook scripts (the
        run's key/value state is theirs together)."""
        if self._env is None:
            try:
                loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            self._env = HostEnv(
                self.ctx.workspace,
                self.ctx.secrets,
                loop,
                approve=self.ctx.approve,
                record_egress=self.ctx.record_egress,
                state_cap=self.ctx.state_cap,
            )
        return self._env

    def sandbox(self) -> RunSandbox:
        """The run's sandbox, made at the first sandboxed call (on the runner's loop)."""
        if self._sandbox is None:
            tools = [t for t, _ in self.sandboxed.values()]
            self._sandbox = RunSandbox(tools, self._host_env())
        return self._sandbox

    def scripts(self) -> ScriptHooks:
        """The run's policy hooks in JavaScript."""
        if self._scripts is None:
            self._scripts = ScriptHooks(list(self.hooks.scripts), self._host_env())
        return self._scripts

    def specs(self, *, read_only: bool = False) -> list[dict[str, Any]]:
        """The granted tools in the chat-completions ``tools`` format (read every turn: MCP
        tools of a server that kept crashing drop out). `read_only`: plan mode's set, only
        the tools that read (`reads`)."""
        if read_only:
            builtins = [s for s in self._builtin_specs if s["function"]["name"] in READ_TOOLS]
            return builtins + self.mcp.specs(read_only=True) + self._sandbox_specs(True)
        return self._builtin_specs + self.mcp.specs() + self._sandbox_specs(False)

    def _sandbox_specs(self, read_only: bool) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool, _ in self.sandboxed.values()
            if tool.read_only or not read_only
        ]

    def reads(self, name: str) -> bool:
        """Whether `name` is a tool plan mode offers: a granted built-in that only reads, or
        an MCP tool its server annotates read-only (``readOnlyHint``)."""
        if name in self.mcp.tools:
            tool = self.mcp.available(name)
            return tool is not None and tool.read_only
        if name in self.sandboxed:
            return self.sandboxed[name][0].read_only
        return name in READ_TOOLS and name in self.granted

    def idempotent(self, name: str) -> bool:
        """Whether a call of `name` cut short by a runner loss may simply run again: a
        built-in of IDEMPOTENT_TOOLS, or an MCP tool its server annotates read-only."""
        if name in self.mcp.tools:
            tool = self.mcp.available(name)
            return tool is not None and tool.read_only
        return name in IDEMPOTENT_TOOLS

    def _specs_of_builtins(self) -> list[dict[str, Any]]:
        specs = []
        for name in self.granted:
            model, _ = BUILTINS[name]
            schema = model.model_json_schema()
            schema.pop("title", None)
            specs.append(
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": (model.__doc__ or name).strip(),
                        "parameters": schema,
                    },
                }
            )
        return specs

    def decide(
        self, name: str, arguments: str, call_id: str = "", *, plan_mode: bool = False
    ) -> Decision:
        """The guard's judgement of one call (nexus_runner.guard.pipeline)."""
        return self.guard.judge(name, arguments, call_id, plan_mode=plan_mode)

    async def execute(self, decision: Decision) -> ToolOutcome:
        """Run an accepted call, then the guard's after_tool_call hooks on its output."""
        outcome = await self._execute(decision)
        output, verdict = self.guard.after(decision, outcome.output)
        if verdict is None:
            return outcome
        ok = outcome.ok and verdict.outcome is not Outcome.REFUSE
        return ToolOutcome(ok, output, verdict.note)

    async def _execute(self, decision: Decision) -> ToolOutcome:
        """Run an accepted call; tool errors become a failed outcome, never an exception."""
        if decision.tool in self.mcp.tools:
            result = await self.mcp.call(decision.tool, decision.raw)
            return ToolOutcome(result.ok, result.output)
        if decision.tool in self.sandboxed:
            ran = await self.sandbox().call(decision.tool, decision.raw)
            return ToolOutcome(ran.status == "success", ran.output)
        assert decision.args is not None
        _, handler = BUILTINS[decision.tool]
        self.ctx.call_id = decision.call_id
        try:
            return ToolOutcome(True, await handler(self.ctx, decision.args))
        except ToolError as exc:
            return ToolOutcome(False, str(exc))
        except OSError as exc:
            return ToolOutcome(False, f"{decision.tool}: {exc.strerror or type(exc).__name__}")
        except Exception as exc:  # the tool boundary: no call may kill the runner
            log.exception("tool %s failed unexpectedly", decision.tool)
            return ToolOutcome(False, f"{decision.tool} failed: {type(exc).__name__}: {exc}")
