"""A golden case's input, repository and starting commit come from its golden run (core's
view and events of it). Core does not mark runs golden yet (another slice of issue 39), so
core's answers are stood in for here; the refusals run against a real core in
tests/integration/test_grading.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from nexus_events.events.evals import EvalCase
from nexus_events.events.queries import RunEventView, RunsEventsReply, RunView

from nexus_lab.case_runs import NotGoldenError, case_source
from nexus_lab.core_client import CoreClient

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def view(golden: bool) -> RunView:
    return RunView.model_validate(
        {"run_id": "gold-1", "status": "completed", "reason": None, "message": None,
         "agent_id": "impl", "task_id": None, "origin": "cli", "input": "fix the parser",
         "requested_by": None, "parent_run_id": None, "attempt": 1, "runtime": None,
         "runtime_handle": None, "queue_position": None, "catalog_revisions": {}, "phases": {},
         "ended_at": None, "last_event_at": None, "turns": 3, "tokens_in": 0, "tokens_out": 0,
         "cost_usd": 0.0, "result": None, "last_seq": 9, "golden": golden}
    )  # fmt: skip


def event(seq: int, name: str, body: dict[str, Any]) -> RunEventView:
    return RunEventView(seq=seq, event=name, time=T0, event_id=f"e{seq}", source="x", body=body)


class GoldenCore(CoreClient):
    """Core's answers about one run, `gold-1`."""

    def __init__(self, golden: bool) -> None:
        super().__init__(None, 1.0)
        self.golden = golden

    async def run(self, run_id: str) -> RunView | None:
        return view(self.golden) if run_id == "gold-1" else None

    async def events(self, run_id: str, from_seq: int = 1) -> RunsEventsReply | None:
        return RunsEventsReply(
            run_id=run_id,
            events=[
                event(1, "requested", {"repo": {"url": "/srv/repo", "ref": "main"}}),
                event(4, "started", {"base_commit": "abc123"}),
            ],
        )


async def test_a_golden_case_runs_its_golden_runs_task_on_its_starting_commit() -> None:
    case = EvalCase(id="old", golden="gold-1")
    source = await case_source(GoldenCore(golden=True), case)
    assert source.input == "fix the parser"
    assert source.repo is not None
    assert (source.repo.url, source.repo.ref, source.repo.branch) == ("/srv/repo", "abc123", None)


async def test_a_case_with_its_own_input_needs_no_core() -> None:
    case = EvalCase.model_validate({"id": "new", "input": "x", "repo": "/srv/r"})
    source = await case_source(GoldenCore(golden=False), case)
    assert (source.input, source.repo and source.repo.url) == ("x", "/srv/r")


async def test_a_run_not_marked_golden_is_refused() -> None:
    with pytest.raises(NotGoldenError, match="run gold-1 is not marked golden"):
        await case_source(GoldenCore(golden=False), EvalCase(id="old", golden="gold-1"))
