"""Typed outputs: `finish.details` must fit the agent's `output_schema` (a JSON Schema).

A `finish` whose details do not fit is not accepted: its tool result tells the model what is
wrong (path and message) and the run goes on, so the model can call `finish` again. Every such
attempt is a turn like any other (budgets count it). Once the retries are spent, the next
misfit fails the run with reason `invalid_output` and the errors in the detail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from nexus_events.contract.runstate import RunStatus
from nexus_events.events.runs import Reason

from nexus_runner.errors import RunStopped
from nexus_runner.safety import truncate

# Kept short: the model reads these, and the run's failed event carries them.
MAX_ERRORS = 10
MAX_MESSAGE_CHARS = 200
MAX_SCHEMA_CHARS = 2_000


@dataclass(frozen=True)
class OutputError:
    """One reason `finish.details` does not fit: where (a JSON path from `$`, the details
    object) and what."""

    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


def _validator(schema: dict[str, Any]) -> Validator:
    """A validator of the schema's own draft ($schema), 2020-12 when it names none; raises
    `RunStopped` when the schema itself is not a valid JSON Schema."""
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = exc.json_path
        raise RunStopped(
            RunStatus.FAILED,
            Reason.INVALID_REQUEST,
            f"the agent's output_schema is not a valid JSON Schema: {where}: {exc.message}",
            {"output_schema": {"path": where, "message": _short(exc.message)}},
        ) from exc
    return cls(schema)


def _short(message: str) -> str:
    """A message cut in its middle: jsonschema's start with the offending value (which the
    model just sent) and end with what was expected, the part worth keeping."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    keep = MAX_MESSAGE_CHARS // 2
    return f"{message[:keep]} ... {message[-keep:]}"


class TypedOutput:
    """The output schema of one run and how many times a misfit was answered so far."""

    def __init__(self, schema: dict[str, Any], retries: int) -> None:
        self.schema = schema
        self.retries = retries
        self.misfits = 0
        self._validator = _validator(schema)
        self.last_errors: list[OutputError] = []

    @classmethod
    def of(cls, schema: dict[str, Any] | None, retries: int) -> TypedOutput | None:
        """None when the agent declares no schema (any details go)."""
        return None if schema is None else cls(schema, retries)

    def errors(self, details: dict[str, Any]) -> list[OutputError]:
        """Why `details` does not fit, at most `MAX_ERRORS` of them, by path; [] if it fits."""
        found = sorted(self._validator.iter_errors(details), key=lambda e: list(map(str, e.path)))
        return [OutputError(e.json_path, _short(e.message)) for e in found[:MAX_ERRORS]]

    def misfit(self, errors: list[OutputError]) -> str:
        """Record a misfit; the tool result that tells the model what to fix."""
        self.misfits += 1
        self.last_errors = errors
        lines = [f"- {e.path}: {e.message}" for e in errors]
        left = self.retries - self.misfits + 1
        schema = truncate(json.dumps(self.schema, separators=(",", ":")), MAX_SCHEMA_CHARS)[0]
        ending = (
            f"Call `finish` again with details that fit ({left} attempt(s) left)."
            if left > 0
            else "No attempts left: the run fails."
        )
        return "\n".join(
            [
                "error: finish.details does not fit the agent's output schema;"
                " the run is not finished.",
                *lines,
                f"Schema of details: {schema}",
                ending,
            ]
        )

    @property
    def exhausted(self) -> bool:
        """True once a misfit came after every retry was used: the run must fail."""
        return self.misfits > self.retries

    def failure(self) -> RunStopped:
        """The run's ending once exhausted: failed, invalid_output, the last errors."""
        return RunStopped(
            RunStatus.FAILED,
            Reason.INVALID_OUTPUT,
            f"finish.details did not fit the agent's output_schema after {self.misfits} attempt(s)",
            {"errors": [e.as_dict() for e in self.last_errors], "attempts": self.misfits},
        )
