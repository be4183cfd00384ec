"""The budget warning's text and write (pure): cost limit first, else tokens; no task, no
write; the write id is one per (budget revision, scope, period)."""

from __future__ import annotations

from nexus_events.events.budgets import BudgetThresholdCrossed

from nexus_plane_sync.budgetreports import budget_writes, warning_text


def _crossed(**overrides: object) -> BudgetThresholdCrossed:
    values: dict[str, object] = {
        "budget_id": "b",
        "revision": 3,
        "instance": "flow_run:fr-1",
        "bucket": "total",
        "share": 0.815,
        **overrides,
    }
    return BudgetThresholdCrossed.model_validate(values)


def test_the_text_names_the_cost_limit_else_the_token_limit() -> None:
    assert warning_text(_crossed(limit_cost_usd=1250.0)) == (
        "Budget b: flow_run:fr-1 has used 82 % of $1,250.00 for total"
    )
    assert warning_text(_crossed(limit_tokens=200_000)) == (
        "Budget b: flow_run:fr-1 has used 82 % of 200,000 tokens for total"
    )


def test_a_flow_runs_warning_goes_on_its_task_and_reports_into_the_flows_agent_run() -> None:
    [write] = budget_writes(_crossed(limit_cost_usd=5.0, task_id="T-1", flow_run_id="fr-1"))
    assert (write.write_id, write.op, write.task_id) == (
        "budget:b:r3:flow_run:fr-1:total:threshold",
        "run_report",
        "T-1",
    )
    assert write.payload["agent_run_of"] == "fr-1"
    assert write.payload["html"] == (
        "<p>💸 Budget b: flow_run:fr-1 has used 82 % of $5.00 for total.</p>"
    )
    assert budget_writes(_crossed(limit_cost_usd=5.0)) == []
