"""Which tools a run may use, how a call is judged (run, refuse, ask a human) and run."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from nexus_events.events.specs import Permissions, ToolGrant
from pydantic import ValidationError

from nexus_runner import safety
from nexus_runner.errors import PathEscape, ToolError
from nexus_runner.git import Git
from nexus_runner.safety import destructive_reason
from nexus_runner.tools.args import DelegateArgs, FinishArgs, RememberArgs, ToolArgs
from nexus_runner.tools.builtin import BUILTINS
from nexus_runner.tools.mcp import McpTools
from nexus_runner.workspace import Workspace

if TYPE_CHECKING:
    from nexus_runner.tools.memory import RunMemory

# Argument fields holding workspace paths, checked before a call is even announced.
_PATH_FIELDS = ("path", "cwd")
_GIT_PUSH = re.compile(r"\bgit\b[^;&|]*\bpush\b")
_GIT_COMMIT = re.compile(r"\bgit\b[^;&|]*\bcommit\b")


@dataclass
class ToolContext:
    """What tools act on, and what they record for the result."""

    workspace: Workspace
    git: Git
    shell_timeout: float
    output_cap: int
    test_command: str | None = None
    commits: list[str] = field(default_factory=list)
    tests_passed: bool | None = None
    last_exit_code: int | None = None
    finished: FinishArgs | None = None
    # Long-term memory of the run (the `remember` tool); None: no connection to it.
    memory: RunMemory | None = None
    # Id of the tool call being executed (calls run one at a time): what makes a call's
    # side effect idempotent, e.g. the id a `remember` records under.
    call_id: str = ""
    # The `delegate` tool's way out (nexus_runner.delegation); None: not available.
    delegate: Callable[[DelegateArgs], Awaitable[str]] | None = None
    # Values read from secret places: kept out of tool output, events, commits and pushes.
    secrets: safety.SecretRegistry = field(default_factory=safety.SecretRegistry)
    # HOME of shell commands: a directory of the run's own, not the runner's (its ~/.ssh).
    home: Path | None = None


@dataclass(frozen=True)
class Decision:
    """How a call will be handled: run it, refuse it, or ask for approval first."""

    tool: str
    action: Literal["run", "refuse", "approve", "invalid"]
    args: ToolArgs | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    call_id: str = ""


@dataclass(frozen=True)
class ToolOutcome:
    ok: bool
    output: str


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
    """The tools granted to a run, judged against its permissions."""

    def __init__(
        self,
        grants: list[ToolGrant],
        permissions: Permissions,
        context: ToolContext,
        mcp: McpTools | None = None,
    ) -> None:
        self.granted = {g.name: g for g in grants if g.name in BUILTINS}
        self.unknown = sorted(g.name for g in grants if g.name not in BUILTINS)
        if "finish" not in self.granted:  # every run must be able to end itself
            self.granted["finish"] = ToolGrant(name="finish")
        self.permissions = permissions
        self.ctx = context
        self.mcp = mcp or McpTools([])
        self._builtin_specs = self._specs_of_builtins()

    def specs(self) -> list[dict[str, Any]]:
        """The granted tools in the chat-completions ``tools`` format (read every turn: MCP
        tools of a server that kept crashing drop out)."""
        return self._builtin_specs + self.mcp.specs()

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

    def decide(self, name: str, arguments: str, call_id: str = "") -> Decision:
        """Parse and judge one call: refusals carry a message the model can read."""
        decision = self._decide(name, arguments)
        return dataclasses.replace(decision, call_id=call_id) if call_id else decision

    def _decide(self, name: str, arguments: str) -> Decision:  # noqa: PLR0911
        try:
            raw = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return Decision(name, "invalid", reason=f"arguments are not valid JSON: {exc}")
        if not isinstance(raw, dict):
            return Decision(name, "invalid", reason="arguments must be a JSON object")
        if name in self.mcp.tools:
            return self._decide_mcp(name, raw)
        if name not in self.granted:
            offered = ", ".join(sorted(self.granted))
            return Decision(
                name, "refuse", raw=raw, reason=f"tool {name!r} is not granted; use: {offered}"
            )
        model, _ = BUILTINS[name]
        try:
            args = model.model_validate(raw)
        except ValidationError as exc:
            errors = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return Decision(name, "invalid", raw=raw, reason=f"invalid arguments: {errors}")
        refusal = self._refusal(name, args)
        if refusal is not None:
            return Decision(name, "refuse", args, raw, refusal)
        if name in self.permissions.approval_required_tools:
            return Decision(name, "approve", args, raw, f"{name} requires approval")
        command = getattr(args, "command", None)
        if name == "run_shell" and isinstance(command, str):
            why = destructive_reason(command)
            if why is not None:
                return Decision(name, "approve", args, raw, f"destructive command: {why}")
        return Decision(name, "run", args, raw)

    def _decide_mcp(self, name: str, raw: dict[str, Any]) -> Decision:
        """MCP tools: granted per server in the definition; they ask a human unless the
        definition marks them auto-approved (or the permissions require approval anyway)."""
        tool = self.mcp.available(name)
        if tool is None:
            return Decision(name, "refuse", raw=raw, reason=f"tool {name!r} has been withdrawn")
        if not tool.auto_approved or name in self.permissions.approval_required_tools:
            return Decision(name, "approve", raw=raw, reason=f"MCP tool {name} requires approval")
        return Decision(name, "run", raw=raw)

    def _refusal(self, name: str, args: ToolArgs) -> str | None:
        for attr in _PATH_FIELDS:
            value = getattr(args, attr, None)
            if isinstance(value, str):
                try:
                    self.ctx.workspace.resolve(value)
                except PathEscape as exc:
                    return str(exc)
        if name == "git_commit" and not self.permissions.can_commit:
            return "this run is not permitted to commit"
        refused = self._reach_refusal(args)
        if refused is not None:
            return refused
        command = getattr(args, "command", None)
        if name == "run_shell" and isinstance(command, str):
            if _GIT_PUSH.search(command):
                return "pushing is done by the runner when the run finishes, not from the shell"
            if _GIT_COMMIT.search(command) and not self.permissions.can_commit:
                return "this run is not permitted to commit"
        return None

    def _reach_refusal(self, args: ToolArgs) -> str | None:
        """Tools that reach beyond the run: only into its own memory scopes, only to the
        agents its definition allows."""
        if isinstance(args, RememberArgs) and self.ctx.memory is not None:
            try:  # a run writes only into its own scopes: refused before anything is sent
                self.ctx.memory.scopes.resolve(args.scope)
            except ToolError as exc:
                return str(exc)
        if isinstance(args, DelegateArgs):
            # The definition's allow-list: `tools: [{name: delegate, options: {agents: [..]}}]`.
            allowed = self.granted["delegate"].options.get("agents")
            if isinstance(allowed, list) and args.agent not in allowed:
                return f"this agent may delegate only to: {', '.join(map(str, allowed)) or 'none'}"
        return None

    async def execute(self, decision: Decision) -> ToolOutcome:
        """Run an accepted call; tool errors become a failed outcome, never an exception."""
        if decision.tool in self.mcp.tools:
            result = await self.mcp.call(decision.tool, decision.raw)
            return ToolOutcome(result.ok, result.output)
        assert decision.args is not None
        _, handler = BUILTINS[decision.tool]
        self.ctx.call_id = decision.call_id
        try:
            return ToolOutcome(True, await handler(self.ctx, decision.args))
        except ToolError as exc:
            return ToolOutcome(False, str(exc))
        except OSError as exc:
            return ToolOutcome(False, f"{type(exc).__name__}: {exc}")
