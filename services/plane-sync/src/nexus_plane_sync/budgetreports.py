"""What a budget's warning shows on Plane (docs/spend.md): one comment on the work item of the
task a budget's scope is about, when the scope passes the budget's ``warn_at`` share.

Pure: a `BudgetThresholdCrossed` in, at most one outbox write out. The spend service announces
a threshold once per (budget revision, scope, period); the write id names exactly that, so a
re-published or re-applied event queues nothing new, and the comment's external id (the
write id) keeps a retried write from posting twice.
"""

from __future__ import annotations

from html import escape

from nexus_events.events.budgets import BudgetThresholdCrossed

from nexus_plane_sync.decisions import Write


def _share(share: float) -> str:
    return f"{round(share * 100)} %"


def warning_text(event: BudgetThresholdCrossed) -> str:
    """``Budget alpha-task: task:T-1 has used 82 % of $10.00 for total``: the cost limit when
    the budget has one, else the token limit."""
    if event.limit_cost_usd is not None:
        limit = f"${event.limit_cost_usd:,.2f}"
    elif event.limit_tokens is not None:
        limit = f"{event.limit_tokens:,} tokens"
    else:  # a runs-only budget warns of its run count: the share says enough
        limit = "its limit"
    return (
        f"Budget {event.budget_id}: {event.instance} has used {_share(event.share)} of"
        f" {limit} for {event.bucket}"
    )


def budget_writes(event: BudgetThresholdCrossed) -> list[Write]:
    """The warning comment on the task's work item; none for a scope without a task."""
    if event.task_id is None:
        return []
    text = warning_text(event)
    write_id = (
        f"budget:{event.budget_id}:r{event.revision}:{event.instance}:{event.bucket}:threshold"
    )
    payload = {
        "kind": "notice",
        "html": f"<p>💸 {escape(text)}.</p>",
        "body": f"{text}.",
        "activity": "thought",
        # A Plane agent run, in that mode, per budget: a warning belongs to no one run.
        "agent_run_of": event.flow_run_id or f"budget:{event.budget_id}",
    }
    return [Write(write_id, "run_report", event.task_id, None, None, payload)]
