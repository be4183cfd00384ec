"""The guard's one verdict type: what every step of the pipeline answers about a call."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from nexus_events.events import GuardNote

if TYPE_CHECKING:
    from nexus_runner.tools.args import ToolArgs


class Outcome(StrEnum):
    """What happens to a call (before it runs) or to its output (after)."""

    RUN = "run"  # a hook's allow; a dial's "runs"
    ASK_APPROVAL = "approve"  # a human decides first
    REFUSE = "refuse"  # a hook's deny; after a call: the output is withheld
    INVALID = "invalid"  # arguments the tool cannot take: an error for the model to fix
    REDACT = "redact"  # after a call only: the output was rewritten


# The one strictness table: when several hooks judge a call, the strictest wins (the first of
# equals). Redacting never stops a call, so it weighs what running does.
STRICTNESS: dict[Outcome, int] = {
    Outcome.RUN: 0,
    Outcome.REDACT: 0,
    Outcome.ASK_APPROVAL: 1,
    Outcome.REFUSE: 2,
    Outcome.INVALID: 2,
}

# How a hook rule's (or script's) word for its decision reads as an outcome.
HookDecision = Literal["allow", "ask", "deny", "redact"]
FROM_HOOK: dict[str, Outcome] = {
    "allow": Outcome.RUN,
    "ask": Outcome.ASK_APPROVAL,
    "deny": Outcome.REFUSE,
    "redact": Outcome.REDACT,
}
# ... and how events record it (`GuardNote.decision`, the contract's words).
_NOTED: dict[Outcome, HookDecision] = {
    Outcome.RUN: "allow",
    Outcome.ASK_APPROVAL: "ask",
    Outcome.REFUSE: "deny",
    Outcome.INVALID: "deny",
    Outcome.REDACT: "redact",
}


@dataclass(frozen=True)
class Verdict:
    """A step's judgement: its outcome, why, and what decided it."""

    outcome: Outcome
    reason: str = ""
    # The hook rule (or script) that decided; None: the dial or a hard refusal did.
    rule: str | None = None
    # The class of a shell command (nexus_runner.guard.shell), when one was classified.
    command_class: str | None = None
    # What the call's events record of how the guard judged it; None: it was refused (or
    # found invalid) before the dial and hooks saw it.
    note: GuardNote | None = None

    def stricter_than(self, other: Verdict | None) -> bool:
        return other is None or STRICTNESS[self.outcome] > STRICTNESS[other.outcome]

    def noted(self) -> Verdict:
        """This verdict with its note for the events."""
        note = GuardNote(
            decision=_NOTED[self.outcome],
            rule=self.rule,
            reason=self.reason,
            command_class=self.command_class,
        )
        return Verdict(self.outcome, self.reason, self.rule, self.command_class, note)


@dataclass(frozen=True)
class Decision:
    """One tool call and the guard's verdict on it: run it, refuse it, ask a human first, or
    tell the model its arguments are invalid."""

    tool: str
    verdict: Verdict
    args: ToolArgs | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""

    @property
    def action(self) -> Outcome:
        return self.verdict.outcome

    @property
    def reason(self) -> str:
        return self.verdict.reason

    @property
    def guard(self) -> GuardNote | None:
        """How the guard judged the call (dial, command class, hooks); None: not judged."""
        return self.verdict.note
