"""A budget ask (docs/spend.md) on the console's approvals page, on a real core, NATS and
PostgreSQL: listed like a run's approval with its team spelt out, decided by an operator who
is a member of the ask's team (NEXUS_TEAMS), refused for one who is not, naming the team."""

from __future__ import annotations

import pytest
from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import INBOX, RUNS
from nexus_events.events import ApprovalDecision, ApprovalRefused
from nexus_events.transport.bus import Bus
from nexus_testing.budget_asks import ASK_APPROVAL_ID, open_budget_ask
from nexus_testing.polling import eventually

from .conftest import OPERATE_TOKEN, Clients


async def test_a_budget_ask_is_listed_and_answered_by_its_team_only(
    bus: Bus, core: CoreApp, clients: Clients, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEXUS_TEAMS", '{"alpha": ["console:alice", "slack:U1"]}')
    ask = await open_budget_ask(bus, approvers=["team:alpha"])
    client = await clients()
    await client.login(OPERATE_TOKEN)

    async def listed() -> str:
        return (await client.get("/approvals"))[1]

    row_id = f'id="approval-{ask}-{ASK_APPROVAL_ID}"'
    page = await eventually(listed, lambda p: row_id in p, what="the ask listed")
    row = page.split(row_id, 1)[1].split("</tr>", 1)[0]
    assert "budget_extend" in row
    assert "extend team:alpha&#39;s alpha-monthly by $10" in row
    assert "team:alpha (console:alice, slack:U1)" in row

    # The operator `oper` is not in team alpha: refused, told why, audited, nothing decided.
    path = f"/runs/{ask}/approvals/{ASK_APPROVAL_ID}"
    status, text = await client.post(path, {"decision": "approve", "csrf": client.csrf})
    assert status == 403, text
    assert "team:alpha (console:alice,slack:U1)" in text  # the policy's own description
    refused = [
        d.event
        async for d in bus.replay(
            RUNS, filter_subject=subjects.run_event(ask, RunEvent.APPROVAL_REFUSED)
        )
    ]
    assert [(r.answered_by, r.surface) for r in refused if isinstance(r, ApprovalRefused)] == [
        ("console:oper", "console")
    ]
    assert [d async for d in bus.replay(INBOX, filter_subject=subjects.inbox(ask))] == []

    # Once `oper` is a member (the console reads NEXUS_TEAMS per answer), the answer decides.
    monkeypatch.setenv("NEXUS_TEAMS", '{"alpha": ["console:oper"]}')
    status, text = await client.post(path, {"decision": "approve", "csrf": client.csrf})
    assert status == 200, text
    [decision] = [d.event async for d in bus.replay(INBOX, filter_subject=subjects.inbox(ask))]
    assert isinstance(decision, ApprovalDecision)
    assert (decision.approval_id, decision.decision, decision.decided_by) == (
        ASK_APPROVAL_ID,
        "approve",
        "console:oper",
    )
