"""Flow conditions and input templates: CEL, the Common Expression Language (cel-python).

CEL is what Kubernetes admission policies and Envoy use for the same job: conditions written
by operators, evaluated by a service. It cannot loop forever, call out, or reach Python
objects; an expression sees only the JSON-like values it is given. Conditions read like
``review.verdict == "request_changes"``; a template is text with ``{{ <expression> }}``
holes, a string value inserted as is and any other value as JSON.

Needs the ``flows`` extra (``nexus-events[flows]``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

# The longest expression or template accepted: conditions are one line, templates a prompt.
MAX_EXPRESSION = 2_000
MAX_TEMPLATE = 20_000
_HOLE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)

_ENV = celpy.Environment()


class ExpressionError(ValueError):
    """An expression that does not parse, or that failed on the values it was given."""


@dataclass(frozen=True)
class Expression:
    """A compiled CEL expression; `evaluate` gives plain Python (JSON) values."""

    text: str
    _program: Any

    def evaluate(self, context: Mapping[str, Any]) -> Any:
        try:
            value = self._program.evaluate(json_to_cel(dict(context)))
        except CELEvalError as exc:
            raise ExpressionError(f"{self.text!r}: {_eval_message(exc)}") from None
        if isinstance(value, CELEvalError):
            raise ExpressionError(f"{self.text!r}: {_eval_message(value)}")
        return plain(value)

    def test(self, context: Mapping[str, Any]) -> bool:
        """Whether a condition holds; anything but a boolean is an error, not a truthy value."""
        value = self.evaluate(context)
        if not isinstance(value, bool):
            raise ExpressionError(f"{self.text!r} gave {value!r}, not true or false")
        return value


# Compiled once per text: every decode of a flow definition (each `accepted` event the flows
# projection reads) validates its templates, and CEL parsing was ~10 % of a flows burst's CPU.
# An `Expression` is immutable, so callers can share one.
@lru_cache(maxsize=2048)
def compile_expression(text: str) -> Expression:
    """Parse `text`; raise `ExpressionError` with a one-line reason if it is not valid CEL."""
    if not text.strip():
        raise ExpressionError("empty expression")
    if len(text) > MAX_EXPRESSION:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION} characters")
    try:
        ast = _ENV.compile(text)
    except CELParseError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
        raise ExpressionError(f"{text!r} does not parse: {first}") from None
    return Expression(text, _ENV.program(ast))


@dataclass(frozen=True)
class Template:
    """Text with ``{{ expression }}`` holes."""

    text: str
    parts: tuple[str | Expression, ...]

    def render(self, context: Mapping[str, Any]) -> str:
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            value = part.evaluate(context)
            out.append(value if isinstance(value, str) else json.dumps(value, sort_keys=True))
        return "".join(out)


@lru_cache(maxsize=1024)
def compile_template(text: str) -> Template:
    """Parse every hole of `text`; raise `ExpressionError` naming the first bad one."""
    if len(text) > MAX_TEMPLATE:
        raise ExpressionError(f"template longer than {MAX_TEMPLATE} characters")
    parts: list[str | Expression] = []
    at = 0
    for match in _HOLE.finditer(text):
        if match.start() > at:
            parts.append(text[at : match.start()])
        parts.append(compile_expression(match.group(1).strip()))
        at = match.end()
    if at < len(text):
        parts.append(text[at:])
    if "{{" in "".join(p for p in parts if isinstance(p, str)):
        raise ExpressionError("a '{{' without its '}}'")
    return Template(text, tuple(parts))


def plain(value: Any) -> Any:  # noqa: PLR0911 - one return per JSON type
    """A CEL value as plain Python: dict, list, str, int, float, bool or None."""
    if value is None:
        return None
    if isinstance(value, celtypes.BoolType | bool):
        return bool(value)
    if isinstance(value, celtypes.MapType | dict):
        return {str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType | list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def _eval_message(exc: Any) -> str:
    args = getattr(exc, "args", ())
    return str(args[0]) if args else str(exc)
