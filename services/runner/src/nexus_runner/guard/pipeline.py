"""The guard pipeline: every check a tool call goes through, in order, to one `Decision`.

Before a call: plan mode, parsing, the grant, the arguments, the hard refusals (paths,
commit/push, reach), the auto-approve dial, the permissions' approval gate, the declarative
hooks, then the JavaScript hooks. After it: the hooks again, on its output. The first step
that refuses (or finds the arguments invalid) ends the judgement; the dial's verdict is the
starting point of the hooks, the strictest of which wins.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from nexus_runner import plan
from nexus_runner.guard import hooks as guard_hooks
from nexus_runner.guard import refusals
from nexus_runner.guard.policy import judge_builtin, judge_mcp, judge_sandboxed
from nexus_runner.guard.verdict import Decision, Outcome, Verdict
from nexus_runner.tools.builtin import BUILTINS

if TYPE_CHECKING:
    from nexus_runner.tools.registry import ToolRegistry

_RUN, _ASK, _REFUSE, _INVALID = Outcome.RUN, Outcome.ASK_APPROVAL, Outcome.REFUSE, Outcome.INVALID


def _refused(name: str, reason: str, raw: dict[str, Any] | None = None) -> Decision:
    return Decision(name, Verdict(_REFUSE, reason), raw=raw or {})


def _invalid(name: str, reason: str, raw: dict[str, Any] | None = None) -> Decision:
    return Decision(name, Verdict(_INVALID, reason), raw=raw or {})


class GuardPipeline:
    """The guard of one run's tools: judges each call against the registry's grants, the
    run's permissions and hooks."""

    def __init__(self, tools: ToolRegistry) -> None:
        self.tools = tools

    def judge(
        self, name: str, arguments: str, call_id: str = "", *, plan_mode: bool = False
    ) -> Decision:
        """Parse and judge one call: refusals carry a message the model can read."""
        decision = self._plan_mode(name, arguments) if plan_mode else None
        if decision is None:
            decision = self._judge(name, arguments)
        return Decision(decision.tool, decision.verdict, decision.args, decision.raw, call_id)

    def _plan_mode(self, name: str, arguments: str) -> Decision | None:
        """While plan mode is active: exit_plan_mode asks for the plan's approval, and any tool
        that does not read is refused before the other steps see it. None: go on."""
        if name == plan.EXIT_PLAN_MODE:
            raw = plan.lenient_arguments(arguments)
            problem = plan.invalid_plan(raw)
            if problem is not None:
                return _invalid(name, problem, raw)
            return Decision(name, Verdict(_ASK, "a plan"), raw=raw)
        if not self.tools.reads(name):
            return _refused(name, plan.refusal(name), plan.lenient_arguments(arguments))
        return None

    def _judge(self, name: str, arguments: str) -> Decision:  # noqa: PLR0911
        try:
            raw = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return _invalid(name, f"arguments are not valid JSON: {exc}")
        if not isinstance(raw, dict):
            return _invalid(name, "arguments must be a JSON object")
        tools = self.tools
        if name in tools.mcp.tools:
            return self._mcp(name, raw)
        if name in tools.sandboxed:
            return self._sandboxed(name, raw)
        if (unavailable := tools.mcp.unavailable_note(name)) is not None:
            return _refused(name, unavailable, raw)
        if name not in tools.granted:
            # Everything the model may call now: built-ins and the MCP tools still offered.
            offered = ", ".join(
                sorted(tools.granted) + sorted(tools.mcp.names()) + sorted(tools.sandboxed)
            )
            return _refused(name, f"tool {name!r} is not granted; use: {offered}", raw)
        return self._builtin(name, raw)

    def _builtin(self, name: str, raw: dict[str, Any]) -> Decision:
        """Built-ins: validated, then the hard refusals, then the dial and the hooks."""
        model, _ = BUILTINS[name]
        try:
            args = model.model_validate(raw)
        except ValidationError as exc:
            errors = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return _invalid(name, f"invalid arguments: {errors}", raw)
        tools = self.tools
        refusal = refusals.hard_refusal(name, args, tools.ctx, tools.permissions, tools.granted)
        if refusal is not None:
            return Decision(name, Verdict(_REFUSE, refusal), args, raw)
        command = getattr(args, "command", None)
        dial = judge_builtin(
            name,
            command if name == "run_shell" and isinstance(command, str) else None,
            tools.permissions.auto_approve,
            tools.ctx.workspace.root,
        )
        verdict = self._hooked(name, raw, dial, destructive=dial.command_class == "destructive")
        return Decision(name, verdict, args, raw)

    def _mcp(self, name: str, raw: dict[str, Any]) -> Decision:
        """MCP tools: granted per server in the definition; they ask a human unless the
        definition marks them auto-approved (or the permissions require approval anyway)."""
        tool = self.tools.mcp.available(name)
        if tool is None:
            return _refused(name, f"tool {name!r} has been withdrawn", raw)
        dial = judge_mcp(
            listed=tool.auto_approved,
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive_hint,
            mode=self.tools.permissions.auto_approve,
        )
        if dial.outcome is _ASK and dial.reason:
            dial = Verdict(_ASK, f"MCP tool {name} requires approval: {dial.reason}")
        destructive = tool.destructive_hint is True and not tool.read_only
        return Decision(name, self._hooked(name, raw, dial, destructive=destructive), raw=raw)

    def _sandboxed(self, name: str, raw: dict[str, Any]) -> Decision:
        """Sandboxed tools: arguments checked against their JSON Schema, then the dial."""
        tool, validator = self.tools.sandboxed[name]
        errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.path))
        if errors:
            detail = "; ".join(
                f"{'.'.join(map(str, e.path)) or 'arguments'}: {e.message}" for e in errors[:5]
            )
            return _invalid(name, f"invalid arguments: {detail}", raw)
        dial = judge_sandboxed(name, tool.capabilities, self.tools.permissions.auto_approve)
        return Decision(name, self._hooked(name, raw, dial, destructive=False), raw=raw)

    def _hooked(
        self, name: str, raw: dict[str, Any], dial: Verdict, *, destructive: bool
    ) -> Verdict:
        """The dial's verdict with the permissions' approval gate and the before_tool_call
        hooks applied: deny refuses, ask asks, allow lifts the dial's ask (never a destructive
        command's, never a tool the permissions gate)."""
        tools = self.tools
        reason = dial.reason
        gated = name in tools.permissions.approval_required_tools
        if gated:
            reason = f"{name} requires approval"
        hook = guard_hooks.before(tools.hooks, name, raw, dial.command_class)
        if tools.hooks.scripts and (hook is None or hook.outcome is not _REFUSE):
            scripted = tools.scripts().before(name, raw)
            if scripted is not None and scripted.stricter_than(hook):
                hook = scripted
        outcome = _ASK if gated else dial.outcome
        rule = None
        if hook is not None:
            rule, reason = hook.rule, hook.reason
            if hook.outcome is _REFUSE:
                outcome = _REFUSE
                reason = f"denied by policy: {hook.reason}"
            elif hook.outcome is _ASK:
                outcome = _ASK
            elif not destructive and not gated:
                outcome = _RUN
        if outcome is _ASK and not reason:
            reason = f"{name} requires approval"
        return Verdict(outcome, reason, rule, dial.command_class).noted()

    def after(self, decision: Decision, output: str) -> tuple[str, Verdict | None]:
        """A call's output after its after_tool_call hooks, then its scripts (unless a hook
        withheld it), and the last verdict applied (noted for the events); None: no hook
        matched."""
        hooks = self.tools.hooks
        if not hooks.after_tool_call and not hooks.scripts:
            return output, None
        command_class = decision.guard.command_class if decision.guard else None
        output, hook = guard_hooks.after(hooks, decision.tool, decision.raw, command_class, output)
        if hooks.scripts and (hook is None or hook.outcome is not _REFUSE):
            output, scripted = self.tools.scripts().after(decision.tool, decision.raw, output)
            hook = scripted or hook
        return output, hook.noted() if hook is not None else None
