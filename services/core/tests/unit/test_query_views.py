"""What core's queries answer is what the contract's reply models (and docs/asyncapi.json)
say: the same fields, valid values."""

from __future__ import annotations

from datetime import UTC, datetime

from nexus_events.events.queries import RunView

from nexus_core.queries import run_view
from nexus_core.run_state import RunRow

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_run_view_has_exactly_the_fields_of_the_contract() -> None:
    row = RunRow(
        run_id="r1",
        status="completed",
        reason="succeeded",
        agent_id="a1",
        catalog_revisions={"agent:a1": 3},
        phases={"requested": T0, "completed": T0},
        ended_at=T0,
        last_event_at=T0,
        turns={1: (10, 5, 0.25)},
        result={"summary": "done"},
        last_seq=9,
    )
    view = run_view(row)
    assert set(view) == set(RunView.model_fields)
    parsed = RunView.model_validate(view)
    assert parsed.tokens_in == 10
    assert parsed.phases["completed"] == T0


def test_a_bare_run_row_is_a_valid_view() -> None:
    assert RunView.model_validate(run_view(RunRow(run_id="r2"))).status is None
