"""Which tools a run may use, how a call is judged (run, refuse, ask a human) and run."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from nexus_events.events import GuardNote
from nexus_events.events.specs import Hooks, Permissions, SandboxTool, ToolGrant
from pydantic import ValidationError

from nexus_runner import safety
from nexus_runner.egress.access import EgressAccess
from nexus_runner.errors import ToolError
from nexus_runner.git import Git
from nexus_runner.guard import hooks as guard_hooks
from nexus_runner.guard.policy import judge_builtin, judge_mcp
from nexus_runner.guard.shell import classify
from nexus_runner.plan import READ_TOOLS
from nexus_runner.sandbox import HostEnv, RunSandbox, StateCap
from nexus_runner.sandbox.hooks import ScriptHooks
from nexus_runner.sandbox.host import RecordEgress
from nexus_runner.tool_sandbox import UNSANDBOXED, ToolSandbox
from nexus_runner.tools.args import DelegateArgs, FinishArgs, RememberArgs, ToolArgs
from nexus_runner.tools.builtin import BUILTINS
from nexus_runner.tools.mcp import McpTools
from nexus_runner.workspace import Workspace

# Built-ins a resumed attempt may run again when the dead one left them unanswered (docs/
# resume.md): reads; write_file and edit_file, since the workspace was restored to the last
# checkpoint (before them) and the same arguments give the same files; finish, which only
# records the run's result. Not run_shell, run_tests, git_commit, delegate, remember: their
# effect (outside the workspace, or not in a checkpoint) may already have happened.
IDEMPOTENT_TOOLS = READ_TOOLS | {"write_file", "edit_file", "finish"}

if TYPE_CHECKING:
    from nexus_runner.tools.memory import RunMemory

log = logging.getLogger(__name__)

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
    # How a sandboxed tool's `nexus.approve(reason)` asks a human (tool, reason) -> granted;
    # None: not wired, such a call fails (closed).
    approve: Callable[[str, str], Coroutine[Any, Any, bool]] | None = None
    # The run's egress proxy (nexus_runner.egress), when its agent has egress grants: what the
    # tools' sandbox binds in (`egress.net_dir`), wraps commands in (`egress.relay_argv()`)
    # and sets (`egress.env()`). None: the tools have no network at all.
    egress: EgressAccess | None = None
    # Records a sandboxed tool's `nexus.http.fetch` as an `egress` event; None: unrecorded.
    record_egress: RecordEgress | None = None
    # Run-wide bounds of the sandboxed tools' key/value state (settings sandbox_state_*).
    state_cap: StateCap = field(default_factory=StateCap)
    # Where shell commands run (run_shell, run_tests, acceptance): the tools' own sandbox.
    sandbox: ToolSandbox = UNSANDBOXED


Action = Literal["run", "refuse", "approve", "invalid"]
_STRICTNESS = {"allow": 1, "redact": 1, "ask": 2, "deny": 3}
_VERDICTS: dict[Action, Literal["allow", "ask", "deny"]] = {
    "run": "allow",
    "approve": "ask",
    "refuse": "deny",
    "invalid": "deny",
}


@dataclass(frozen=True)
class Decision:
    """How a call will be handled: run it, refuse it, or ask for approval first."""

    tool: str
    action: Action
    args: ToolArgs | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    call_id: str = ""
    # How the guard judged the call (dial, command class, hooks); None: not judged.
    guard: GuardNote | None = None


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
    """The tools granted to a run, judged against its permissions."""

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
        if name in self.sandboxed:
            return self._decide_sandboxed(name, raw)
        if (unavailable := self.mcp.unavailable_note(name)) is not None:
            return Decision(name, "refuse", raw=raw, reason=unavailable)
        if name not in self.granted:
            # Everything the model may call now: built-ins and the MCP tools still offered.
            offered = ", ".join(
                sorted(self.granted) + sorted(self.mcp.names()) + sorted(self.sandboxed)
            )
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
        command = getattr(args, "command", None)
        verdict = judge_builtin(
            name,
            command if name == "run_shell" and isinstance(command, str) else None,
            self.permissions.auto_approve,
            self.ctx.workspace.root,
        )
        return self._guarded(
            Decision(name, "approve" if verdict.action == "ask" else "run", args, raw),
            verdict.reason,
            verdict.command_class,
            destructive=verdict.command_class == "destructive",
        )

    def _guarded(
        self, decision: Decision, reason: str, command_class: str | None, *, destructive: bool
    ) -> Decision:
        """The dial's decision with the before_tool_call hooks applied: deny refuses, ask
        asks, allow lifts the dial's ask (never a destructive command's, never a tool the
        permissions gate)."""
        name = decision.tool
        gated = name in self.permissions.approval_required_tools
        if gated:
            reason = f"{name} requires approval"
        hook = guard_hooks.before(self.hooks, name, decision.raw, command_class)
        if self.hooks.scripts and (hook is None or hook.decision != "deny"):
            scripted = self.scripts().before(name, decision.raw)
            if scripted is not None and (
                hook is None or _STRICTNESS[scripted.decision] > _STRICTNESS[hook.decision]
            ):
                hook = scripted
        action: Action = "approve" if gated else decision.action
        rule = None
        if hook is not None:
            rule, reason = hook.rule, hook.reason
            if hook.decision == "deny":
                action = "refuse"
                reason = f"denied by policy: {hook.reason}"
            elif hook.decision == "ask":
                action = "approve"
            elif not destructive and not gated:
                action = "run"
        if action == "approve" and not reason:
            reason = f"{name} requires approval"
        note = GuardNote(
            decision=_VERDICTS[action], rule=rule, reason=reason, command_class=command_class
        )
        return dataclasses.replace(
            decision,
            action=action,
            reason=reason,
            guard=note,
        )

    def _decide_mcp(self, name: str, raw: dict[str, Any]) -> Decision:
        """MCP tools: granted per server in the definition; they ask a human unless the
        definition marks them auto-approved (or the permissions require approval anyway)."""
        tool = self.mcp.available(name)
        if tool is None:
            return Decision(name, "refuse", raw=raw, reason=f"tool {name!r} has been withdrawn")
        verdict = judge_mcp(
            listed=tool.auto_approved,
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive_hint,
            mode=self.permissions.auto_approve,
        )
        reason = f"MCP tool {name} requires approval: {verdict.reason}" if verdict.reason else ""
        return self._guarded(
            Decision(name, "approve" if verdict.action == "ask" else "run", raw=raw),
            reason if verdict.action == "ask" else verdict.reason,
            None,
            destructive=tool.destructive_hint is True and not tool.read_only,
        )

    def _decide_sandboxed(self, name: str, raw: dict[str, Any]) -> Decision:
        """Sandboxed tools: arguments checked against their JSON Schema; the dial asks for every
        call under `off`, and under `curated` for tools that reach beyond the workspace and
        the run's state (http, events); their tokens bound the rest."""
        tool, validator = self.sandboxed[name]
        errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.path))
        if errors:
            detail = "; ".join(
                f"{'.'.join(map(str, e.path)) or 'arguments'}: {e.message}" for e in errors[:5]
            )
            return Decision(name, "invalid", raw=raw, reason=f"invalid arguments: {detail}")
        mode = self.permissions.auto_approve
        reaches = [t for t in tool.capabilities if t.split(":", 1)[0] in ("http", "events")]
        reason = ""
        if mode == "off":
            reason = "auto_approve is off: every call asks"
        elif mode == "curated" and reaches:
            reason = f"sandboxed tool {name} reaches beyond the workspace: {', '.join(reaches)}"
        return self._guarded(
            Decision(name, "approve" if reason else "run", raw=raw),
            reason,
            None,
            destructive=False,
        )

    def _refusal(self, name: str, args: ToolArgs) -> str | None:
        for attr in _PATH_FIELDS:
            value = getattr(args, attr, None)
            if isinstance(value, str):
                try:
                    self.ctx.workspace.resolve(value)
                except ToolError as exc:  # PathEscape, or any failure on the way
                    return str(exc)
        if name == "git_commit" and not self.permissions.can_commit:
            return "this run is not permitted to commit"
        refused = self._reach_refusal(args)
        if refused is not None:
            return refused
        command = getattr(args, "command", None)
        if name == "run_shell" and isinstance(command, str):
            # On the parse tree too: `gi''t push` is a push; the regexes catch what the parser
            # cannot parse.
            git = classify(command, self.ctx.workspace.root).git
            if _GIT_PUSH.search(command) or "push" in git:
                return "pushing is done by the runner when the run finishes, not from the shell"
            if (_GIT_COMMIT.search(command) or "commit" in git) and not self.permissions.can_commit:
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
        """Run an accepted call, then its after_tool_call hooks on the output."""
        outcome = await self._execute(decision)
        if not self.hooks.after_tool_call and not self.hooks.scripts:
            return outcome
        command_class = decision.guard.command_class if decision.guard else None
        output, hook = guard_hooks.after(
            self.hooks, decision.tool, decision.raw, command_class, outcome.output
        )
        if self.hooks.scripts and (hook is None or hook.decision != "deny"):
            output, scripted = self.scripts().after(decision.tool, decision.raw, output)
            hook = scripted or hook
        if hook is None:
            return outcome
        note = GuardNote(decision=hook.decision, rule=hook.rule, reason=hook.reason)
        return ToolOutcome(outcome.ok and hook.decision != "deny", output, note)

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
