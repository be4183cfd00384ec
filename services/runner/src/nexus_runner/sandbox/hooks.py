"""Policy hooks written in JavaScript (`Hooks.scripts`), run sandboxed on the calling thread.

They run inside the registry's synchronous judgement of a call, so only synchronous host
calls are available, and each has a wall limit (1 s unless set) stopped by the epoch
deadline. A hook that throws, breaks a limit or answers nonsense denies: policy fails closed.
"""

from __future__ import annotations

import fnmatch
import json
import re
from typing import Any

from nexus_events.contract.capabilities import Grants
from nexus_events.events import HookScript

from nexus_runner.guard.hooks import withheld
from nexus_runner.guard.verdict import FROM_HOOK, Outcome, Verdict
from nexus_runner.sandbox import engine
from nexus_runner.sandbox.host import Host, HostEnv
from nexus_runner.sandbox.pool import _classify, _Slot

_REGEX = "re:"
_BEFORE = ("allow", "ask", "deny")


def _applies(script: HookScript, tool: str) -> bool:
    if script.tool.startswith(_REGEX):
        return re.search(script.tool[len(_REGEX) :], tool) is not None
    return fnmatch.fnmatchcase(tool, script.tool)


class ScriptHooks:
    """The run's JavaScript hooks, each with one context of its own, reused while healthy."""

    def __init__(self, scripts: list[HookScript], env: HostEnv) -> None:
        self.scripts = scripts
        self.env = env
        self._slots: dict[int, _Slot] = {}

    def _call(self, index: int, call: dict[str, Any]) -> Any:
        """The hook's answer, or a refusing `Verdict` when it failed."""
        script = self.scripts[index]
        label = f"script {script.name}"
        host: Host | None = None
        keep = False
        slot: _Slot | None = None
        try:
            slot = self._slots.pop(index, None) or _Slot(script, entry="hook")
            host = Host(
                self.env,
                script.name,
                Grants.of(script.capabilities),
                script.limits,
                on_trip=slot.trip,
                on_resume=slot.resume,
            )
            slot.host = host
            slot.store.set_epoch_deadline(engine.ticks(script.limits.wall_seconds))
            literal = json.dumps(json.dumps(call))
            answer = slot.context.eval(
                f"JSON.stringify(hook(JSON.parse({literal})) ?? null)",
                filename=f"{script.name}.hook.js",
            )
            if host.violation is not None:
                return Verdict(Outcome.REFUSE, f"hook {label} failed ({host.violation})", label)
            keep = True
            return json.loads(answer) if isinstance(answer, str) else None
        except BaseException as exc:  # noqa: BLE001 - any failure of a hook denies
            message = _classify(exc, script, host)[1] if host is not None else str(exc)
            reason = f"hook {label} failed ({message})"
            return Verdict(Outcome.REFUSE, reason, label)
        finally:
            if slot is not None:
                slot.host = None
                slot.store.set_epoch_deadline(1 << 40)
                if keep:
                    self._slots[index] = slot
                else:
                    slot.close()

    def before(self, tool: str, raw: dict[str, Any]) -> Verdict | None:
        """The strictest answer of the before_tool_call scripts for `tool`."""
        found: Verdict | None = None
        for i, script in enumerate(self.scripts):
            if script.on != "before_tool_call" or not _applies(script, tool):
                continue
            answer = self._call(i, {"tool": tool, "args": raw})
            verdict = self._verdict(script, answer)
            if verdict is not None and verdict.stricter_than(found):
                found = verdict
        return found

    @staticmethod
    def _verdict(script: HookScript, answer: Any) -> Verdict | None:
        label = f"script {script.name}"
        if isinstance(answer, Verdict) or answer is None:
            return answer
        decision = answer.get("decision") if isinstance(answer, dict) else None
        if decision not in _BEFORE:
            return Verdict(Outcome.REFUSE, f"hook {label} answered {answer!r}; denied", label)
        reason = str(answer.get("reason") or f"hook {label} decides {decision}")
        return Verdict(FROM_HOOK[decision], reason, label)

    def after(self, tool: str, raw: dict[str, Any], output: str) -> tuple[str, Verdict | None]:
        """`output` after the after_tool_call scripts for `tool`: withheld or replaced."""
        verdict: Verdict | None = None
        for i, script in enumerate(self.scripts):
            if script.on != "after_tool_call" or not _applies(script, tool):
                continue
            label = f"script {script.name}"
            answer = self._call(i, {"tool": tool, "args": raw, "output": output})
            if isinstance(answer, Verdict) or (
                isinstance(answer, dict) and answer.get("decision") == "deny"
            ):
                reason = (
                    answer.reason
                    if isinstance(answer, Verdict)
                    else str(answer.get("reason") or f"hook {label} withholds the output")
                )
                return withheld(reason, label)
            if isinstance(answer, dict) and isinstance(answer.get("output"), str):
                output = answer["output"]
                verdict = Verdict(
                    Outcome.REDACT, str(answer.get("reason") or f"hook {label} rewrites"), label
                )
            elif answer is not None:
                reason = f"hook {label} answered {answer!r}; the output is withheld"
                return withheld(reason, label)
        return output, verdict
