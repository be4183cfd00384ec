"""Declarative policy hooks (`hooks:` of the agent and its skills): match a call on its
tool, argument values, path and command class; decide allow / ask / deny before it runs and
deny / redact its output after. A rule that cannot be evaluated denies: fail closed."""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from typing import Any

from nexus_events.events.specs import HookRule, Hooks

from nexus_runner.guard.verdict import FROM_HOOK, Outcome, Verdict

_REGEX = "re:"
# Values longer than this are not matched: a regex over megabytes is a denial of service.
MAX_MATCHED_CHARS = 256 * 1024


class HookError(Exception):
    """A rule could not be evaluated on this call."""


def _match(pattern: str, value: str) -> bool:
    if len(value) > MAX_MATCHED_CHARS:
        raise HookError(f"value of {len(value)} characters is over {MAX_MATCHED_CHARS}")
    if pattern.startswith(_REGEX):
        return re.search(pattern[len(_REGEX) :], value) is not None
    return fnmatch.fnmatchcase(value, pattern)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def matches(rule: HookRule, tool: str, raw: dict[str, Any], command_class: str | None) -> bool:
    """Whether every matcher of `rule` matches the call (raises HookError)."""
    if not _match(rule.tool, tool):
        return False
    for key, pattern in rule.args.items():
        if key not in raw or not _match(pattern, _text(raw[key])):
            return False
    if rule.path is not None:
        path = raw.get("path", raw.get("cwd"))
        if not isinstance(path, str) or not _match(rule.path, posixpath.normpath(path)):
            return False
    return not rule.command_class or command_class in rule.command_class


def before(
    hooks: Hooks, tool: str, raw: dict[str, Any], command_class: str | None
) -> Verdict | None:
    """The strictest matching before_tool_call rule's verdict (the first of equals)."""
    found: Verdict | None = None
    for i, rule in enumerate(hooks.before_tool_call):
        label = rule.label(i)
        try:
            hit = matches(rule, tool, raw, command_class)
        except Exception as exc:  # noqa: BLE001 - any failure of a rule denies the call
            reason = f"hook {label} failed ({exc}); the call is denied"
            return Verdict(Outcome.REFUSE, reason, label)
        if not hit:
            continue
        verdict = Verdict(
            FROM_HOOK[rule.decision], rule.reason or f"hook {label} decides {rule.decision}", label
        )
        if verdict.stricter_than(found):
            found = verdict
    return found


def _redacted(rule: HookRule, output: str) -> str:
    if len(output) > MAX_MATCHED_CHARS:
        raise HookError(f"output of {len(output)} characters is over {MAX_MATCHED_CHARS}")
    for pattern in rule.redact:
        output = re.sub(pattern, "[REDACTED]", output)
    return output


def after(
    hooks: Hooks, tool: str, raw: dict[str, Any], command_class: str | None, output: str
) -> tuple[str, Verdict | None]:
    """`output` after the matching after_tool_call rules, and the last verdict applied."""
    verdict: Verdict | None = None
    for i, rule in enumerate(hooks.after_tool_call):
        label = rule.label(i)
        try:
            if not matches(rule, tool, raw, command_class):
                continue
            if rule.decision == "deny":
                reason = rule.reason or f"hook {label} withholds the output"
                return withheld(reason, label)
            output = _redacted(rule, output)
            verdict = Verdict(Outcome.REDACT, rule.reason or f"hook {label} redacts", label)
        except Exception as exc:  # noqa: BLE001 - a failing rule withholds the output
            reason = f"hook {label} failed ({exc}); the output is withheld"
            return withheld(reason, label)
    return output, verdict


def withheld(reason: str, rule: str) -> tuple[str, Verdict]:
    """What a call's output becomes when a hook withholds it, and the verdict saying so."""
    return f"output withheld: {reason}", Verdict(Outcome.REFUSE, reason, rule)
