"""A run as the live view shows it, folded from its events (pure: no I/O, unit-tested)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nexus_events.contract.runstate import (
    TERMINAL_EVENTS,
    RunEvent,
    RunStatus,
    is_terminal,
    next_status,
)
from nexus_events.events import RunDiverged, RunGoldenMarked
from nexus_events.events.lab_specs import OnDivergence
from nexus_events.events.queries import RunView as RunRow
from nexus_events.events.runs import RunBudgetPaused, RunBudgetResumed
from pydantic import ValidationError
from rich.console import Group
from rich.panel import Panel
from rich.table import Table

from nexus_cli.errors import ExitCode
from nexus_cli.output import duration
from nexus_cli.resumelines import attempt_label, describe_resume

# Events shown under "recent" in the live view.
RECENT = 6
# The status line's colour of an ended run (the rest are cyan).
_COLOUR: dict[str, str] = {
    RunStatus.COMPLETED: "green",
    RunStatus.FAILED: "red",
    RunStatus.CANCELLED: "yellow",
}


@dataclass
class RunView:
    run_id: str
    agent_id: str | None = None
    status: str = "unknown"
    phase: str | None = None
    turns: int = 0
    tool_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    first_at: datetime | None = None
    last_at: datetime | None = None
    reason: str | None = None
    message: str | None = None
    result: dict[str, Any] | None = None
    pending_approvals: dict[str, str] = field(default_factory=dict)
    recent: list[str] = field(default_factory=list)
    queue_position: int | None = None
    attempt: int = 1
    max_attempts: int | None = None
    condensations: set[tuple[int, str]] = field(default_factory=set)
    # A replay's first divergence (docs/lab.md), as `describe` words it.
    divergence: str | None = None
    # While a budget's ask holds the run (docs/spend.md): what was reached and how to answer.
    budget_pause: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in {s.value for s in RunStatus} and is_terminal(self.status)

    def elapsed(self, now: datetime | None = None) -> float:
        if self.first_at is None:
            return 0.0
        end = self.last_at if self.terminal else now or self.last_at
        return max(((end or self.first_at) - self.first_at).total_seconds(), 0.0)

    def apply(self, event: str, body: dict[str, Any], at: datetime | None) -> None:
        """Fold one run event (its name, JSON body and stream time) into the view."""
        if at is not None:
            self.first_at = self.first_at or at
            self.last_at = at
        current = None if self.status == "unknown" else self.status
        new = next_status(current, event)
        if new is not None:
            self.status = new.value
        if event != RunEvent.APPROVAL_REFUSED:  # a refused answer leaves the run where it was
            self.phase = event
        if event == RunEvent.REQUESTED:
            self.agent_id = body.get("agent_id", self.agent_id)
        elif event == RunEvent.PREPARED:
            self.agent_id = (body.get("config") or {}).get("agent_id", self.agent_id)
        elif event == RunEvent.QUEUED:
            self.queue_position = body.get("position")
        elif event == RunEvent.HEARTBEAT and body.get("phase"):
            self.phase = f"heartbeat: {body['phase']}"
        elif event == RunEvent.TURN:
            self.turns = max(self.turns, int(body.get("turn", 0)))
            self.tokens_in += int(body.get("tokens_in", 0))
            self.tokens_out += int(body.get("tokens_out", 0))
            self.cost_usd += float(body.get("cost_usd", 0.0))
        elif event == RunEvent.TOOL_CALLED:
            self.tool_calls += 1
            self.phase = f"tool: {body.get('tool')}"
        elif event == RunEvent.APPROVAL_REQUESTED:
            self.pending_approvals[str(body.get("approval_id"))] = str(body.get("summary", ""))
        elif event == RunEvent.APPROVAL_DECIDED:
            self.pending_approvals.pop(str(body.get("approval_id")), None)
        if event in TERMINAL_EVENTS:
            self.reason = body.get("reason")
            self.message = body.get("message") or None
            # The terminal event carries the run's totals; prefer them to our sums.
            self.tokens_in = int(body.get("tokens_in") or self.tokens_in)
            self.tokens_out = int(body.get("tokens_out") or self.tokens_out)
            self.cost_usd = float(body.get("cost_usd") or self.cost_usd)
            self.result = body.get("result")
        self._apply_attempts(event, body)
        self._apply_lab(event, body)
        self._apply_budget(event, body)
        self.recent = [*self.recent, describe(event, body)][-RECENT:]

    def _apply_budget(self, event: str, body: dict[str, Any]) -> None:
        """A budget's pause is shown until the run resumes or ends."""
        if event == RunEvent.BUDGET_PAUSED:
            ask_run, ask_id = body.get("ask_run_id"), body.get("ask_approval_id")
            answer = f"  (nexus approve {ask_run} {ask_id})" if ask_run and ask_id else ""
            self.budget_pause = f"{body.get('message') or body.get('budget_id')}{answer}"
        elif event == RunEvent.BUDGET_RESUMED or event in TERMINAL_EVENTS:
            self.budget_pause = None

    def _apply_attempts(self, event: str, body: dict[str, Any]) -> None:
        """Attempts and condensations (docs/resume.md), from bodies of any shape."""
        if event == RunEvent.PREPARED:
            resume = (body.get("config") or {}).get("resume")
            if isinstance(resume, dict) and isinstance(resume.get("max_attempts"), int):
                self.max_attempts = resume["max_attempts"]
        elif event in (RunEvent.DISPATCHED, RunEvent.RESUMING, RunEvent.RESUMED):
            if isinstance(body.get("attempt"), int):
                self.attempt = max(self.attempt, body["attempt"])
        elif event == RunEvent.CONDENSED:
            condensation = body.get("condensation")
            strategy = condensation.get("strategy") if isinstance(condensation, dict) else None
            # As core counts them: a re-published condensation is the same one.
            turn = body.get("turn")
            self.condensations.add((turn if isinstance(turn, int) else 0, str(strategy)))

    def _apply_lab(self, event: str, body: dict[str, Any]) -> None:
        """A replay's first divergence (docs/lab.md): kept, later ones are not news."""
        if event == RunEvent.DIVERGED and self.divergence is None:
            self.divergence = describe(event, body)

    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.status == RunStatus.COMPLETED else ExitCode.RUN_FAILED

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cost_usd": round(self.cost_usd, 6),
            "elapsed_s": round(self.elapsed(), 3),
            "pending_approvals": self.pending_approvals,
            "result": self.result,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "condensations": len(self.condensations),
            "divergence": self.divergence,
        }

    def render(self, now: datetime | None = None) -> Panel:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        colour = _COLOUR.get(self.status, "cyan")
        grid.add_row(
            "status", f"[{colour}]{self.status}[/]" + (f" ({self.reason})" if self.reason else "")
        )
        grid.add_row("phase", self.phase or "")
        grid.add_row("turns", str(self.turns))
        if self.attempt > 1 or self.condensations:
            grid.add_row(
                "attempt",
                f"{attempt_label(self.attempt, self.max_attempts)}"
                f"   condensations {len(self.condensations)}",
            )
        grid.add_row("tool calls", str(self.tool_calls))
        grid.add_row("tokens", f"{self.tokens_in} in / {self.tokens_out} out  ${self.cost_usd:.4f}")
        grid.add_row("elapsed", duration(self.elapsed(now)))
        if self.divergence:
            grid.add_row("[yellow]lab[/]", self.divergence)
        if self.budget_pause:
            grid.add_row("[yellow]budget[/]", self.budget_pause)
        for approval_id, summary in self.pending_approvals.items():
            grid.add_row(
                "[yellow]approval[/]",
                f"{approval_id}: {summary}  (nexus approve {self.run_id} {approval_id})",
            )
        recent = Table.grid()
        for line in self.recent:
            recent.add_row(f"[dim]{line}[/]")
        title = f"run {self.run_id}" + (f" · {self.agent_id}" if self.agent_id else "")
        return Panel(Group(grid, recent), title=title, title_align="left")


def describe(event: str, body: dict[str, Any]) -> str:  # noqa: PLR0911, PLR0912 - one case per event
    """One line per event for logs and the live view."""
    resume = describe_resume(event, body)
    if resume is not None:
        return resume
    lab = _describe_lab(event, body) or _describe_budget(event, body)
    if lab is not None:
        return lab
    if event == RunEvent.TURN:
        tokens = f"{body.get('tokens_in', 0)}+{body.get('tokens_out', 0)}"
        return f"turn {body.get('turn')}: {tokens} tokens"
    if event == RunEvent.TOOL_CALLED:
        return f"tool_called {body.get('tool')}" + (" (refused)" if body.get("refused") else "")
    if event == RunEvent.TOOL_RESULT:
        return f"tool_result {body.get('tool')} ok={body.get('ok')}"
    if event in TERMINAL_EVENTS and event != RunEvent.COMPLETED:
        return f"{event}: {body.get('reason')} {body.get('message') or ''}".rstrip()
    if event == RunEvent.COMPLETED:
        summary = (body.get("result") or {}).get("summary") or ""
        return f"completed: {summary}".rstrip(": ")
    if event == RunEvent.QUEUED:
        why = f": {body['waiting_for']}" if body.get("waiting_for") else ""
        return f"queued at position {body.get('position')} ({body.get('limit')} limit){why}"
    if event == RunEvent.DISPATCHED:
        start = ", a warm runner" if body.get("warm") else ""
        return f"dispatched to {body.get('runtime')} ({body.get('handle')}{start})"
    if event == RunEvent.APPROVAL_REQUESTED:
        return f"approval_requested {body.get('approval_id')}: {body.get('summary')}"
    if event == RunEvent.APPROVAL_DECIDED:
        return f"approval_decided {body.get('approval_id')}: {body.get('decision')}"
    if event == RunEvent.EGRESS:
        where = (
            f"{body.get('method')} {body.get('host')}:{body.get('port')}{body.get('path') or ''}"
        )
        verdict = f"-> {body.get('status')}" if body.get("allowed") else "refused"
        return f"egress {where} {verdict}: {body.get('reason')}"
    if event == RunEvent.MCP_SERVER_UNAVAILABLE:
        return f"mcp_server_unavailable {body.get('server')}: {body.get('detail')}"
    if event == RunEvent.APPROVAL_REFUSED:
        return (
            f"approval_refused {body.get('approval_id')}: {body.get('answered_by')} may not decide"
        )
    return event


def _describe_budget(event: str, body: dict[str, Any]) -> str | None:
    """A budget's pause and resume of the run (docs/spend.md) in one line; None for any other
    event."""
    try:
        if event == RunEvent.BUDGET_PAUSED:
            p = RunBudgetPaused.model_validate(body)
            ask = f" (ask {p.ask_run_id})" if p.ask_run_id else ""
            return f"budget_paused at turn {p.turn}: {p.message}{ask}"
        if event == RunEvent.BUDGET_RESUMED:
            r = RunBudgetResumed.model_validate(body)
            return (
                f"budget_resumed at turn {r.turn}: budget {r.budget_id} extended"
                f" after {duration(r.waited_seconds)}"
            )
    except ValidationError:
        return event
    return None


def _describe_lab(event: str, body: dict[str, Any]) -> str | None:
    """The lab's run events (docs/lab.md) in one line; None for any other event."""
    try:
        if event == RunEvent.DIVERGED:
            d = RunDiverged.model_validate(body)
            went = "stopped" if d.action is OnDivergence.STOP else "went on live"
            return f"diverged at turn {d.turn} ({d.kind.value}): {d.detail} [{went}]"
        if event == RunEvent.GOLDEN_MARKED:
            g = RunGoldenMarked.model_validate(body)
            verb = "marked golden" if g.golden else "golden mark taken back"
            by = f" by {g.marked_by}" if g.marked_by else ""
            return f"{verb}{by}" + (f": {g.note}" if g.note else "")
    except ValidationError:
        return event
    return None


def lab_lines(reply: dict[str, Any]) -> list[tuple[str, str]]:
    """What the lab knows of a run (core's runs.get reply; docs/lab.md), as ``(label, text)``
    lines; none if nothing (or a reply this CLI cannot read)."""
    try:
        row = RunRow.model_validate(reply)
    except ValidationError:
        return []
    lines: list[tuple[str, str]] = []
    if row.replay_of:
        lines.append(("replay of", row.replay_of))
    if row.forked_from:
        at = f"@{row.fork_turn}" if row.fork_turn is not None else ""
        lines.append(("forked from", f"{row.forked_from}{at}"))
    if row.forks:
        lines.append(("forks", ", ".join(row.forks)))
    if row.golden:
        lines.append(("golden", "yes (an eval case)"))
    if row.diverged_at is not None:
        kind = f" ({row.divergence})" if row.divergence else ""
        lines.append(("divergence", f"at turn {row.diverged_at}{kind}"))
    if row.canary_arm:
        lines.append(("canary arm", row.canary_arm))
    return lines


def delegation_tree(runs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """`runs` (newest first) with each delegated child right under its parent, and its depth.

    A child whose parent is not in the list stays where it is, at depth 0; the order among
    siblings, and among roots, is the input's.
    """
    ids = {r["run_id"] for r in runs}
    children: dict[str, list[dict[str, Any]]] = {}
    roots: list[dict[str, Any]] = []
    for r in runs:
        parent = r.get("parent_run_id")
        if isinstance(parent, str) and parent in ids and parent != r["run_id"]:
            children.setdefault(parent, []).append(r)
        else:
            roots.append(r)
    out: list[tuple[dict[str, Any], int]] = []
    seen: set[str] = set()

    def walk(r: dict[str, Any], depth: int) -> None:
        if r["run_id"] in seen:  # a cycle in bad data: show each run once
            return
        seen.add(r["run_id"])
        out.append((r, depth))
        for child in children.get(r["run_id"], []):
            walk(child, depth + 1)

    for r in roots:
        walk(r, 0)
    for r in runs:  # runs only reachable through a cycle
        if r["run_id"] not in seen:
            walk(r, 0)
    return out


def tree_label(run_id: str, depth: int) -> str:
    return run_id if depth == 0 else "  " * (depth - 1) + "└ " + run_id
