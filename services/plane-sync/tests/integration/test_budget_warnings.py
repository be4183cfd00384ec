"""A budget's warning on Plane (docs/spend.md), on real NATS + PostgreSQL with the fake Plane:
a task's budget passing its warn_at share puts ONE comment on the task's work item, however
often the spend service's event is delivered or re-published; a scope without a task puts
none."""

from __future__ import annotations

from nexus_events.contract import subjects
from nexus_events.events.budgets import BudgetEvent, BudgetThresholdCrossed
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.plane import FakePlane
from tests.support.plane_sync import create_task, plane_events

from nexus_plane_sync.app import PlaneSyncApp

TEXT = "Budget task-cap: task:t-b1 has used 82 % of $10.00 for total."


def crossed(**overrides: object) -> BudgetThresholdCrossed:
    values: dict[str, object] = {
        "budget_id": "task-cap",
        "revision": 1,
        "instance": "task:t-b1",
        "bucket": "total",
        "share": 0.82,
        "spent_cost_usd": 8.2,
        "limit_cost_usd": 10.0,
        "task_id": "t-b1",
        **overrides,
    }
    return BudgetThresholdCrossed.model_validate(values)


def _warnings(plane: FakePlane, item: str) -> list[str]:
    return [c["comment_html"] for c in plane.comments_of(item) if "Budget " in c["comment_html"]]


async def test_one_comment_per_warning_on_the_tasks_work_item(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    await create_task(bus, "t-b1", "Spend carefully")
    item = await eventually(lambda: plane.by_external_id("t-b1"), what="the work item")
    subject = subjects.budget_event("task-cap", BudgetEvent.THRESHOLD_CROSSED)
    await bus.publish(subject, crossed())
    # The same warning published again (a spend replica's retry under another message id),
    # and a global budget's warning, which is about no task.
    await bus.publish(subject, crossed(), msg_id="again")
    await bus.publish(
        subjects.budget_event("all-spend", BudgetEvent.THRESHOLD_CROSSED),
        crossed(budget_id="all-spend", instance="global", bucket="2026-11", task_id=None),
    )
    found = await eventually(lambda: _warnings(plane, item["id"]) or None, what="the warning")
    assert TEXT in found[0]

    # A later warning of another period of the same budget is a second comment: proof the
    # mirror read past the duplicate before the count below is taken.
    await bus.publish(subject, crossed(bucket="2026-12", instance="task:t-b1"))
    await eventually(lambda: len(_warnings(plane, item["id"])) >= 2 or None, what="the next")
    warnings = _warnings(plane, item["id"])
    assert len(warnings) == 2
    assert "for 2026-12" in warnings[1]

    async def budget_writes() -> list[str]:
        done = await plane_events(bus, "write_succeeded")
        return sorted(e.write_id for e in done if e.write_id.startswith("budget:"))

    written = await eventually(budget_writes, lambda w: len(w) >= 2, what="both recorded")
    assert written == [
        "budget:task-cap:r1:task:t-b1:2026-12:threshold",
        "budget:task-cap:r1:task:t-b1:total:threshold",
    ]
