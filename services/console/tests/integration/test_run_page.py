"""The run page: facts from core, every event of the run's stream (poison shown as such), its
log, the approvals it waits on, cancel (operate only, audited refusal), live events and log
lines, and the diff of its pushed branch read from the remote."""

from __future__ import annotations

import asyncio
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent, RunStatus
from nexus_events.contract.streams import RUNS
from nexus_events.events import (
    ApprovalRequested,
    CancelRequested,
    RunCompleted,
    RunRequested,
    RunStarted,
    RunTurn,
    ToolCalled,
    ToolResult,
)
from nexus_events.events.budgets import BudgetPeriod, OnExceed
from nexus_events.events.logs import LogLine
from nexus_events.events.runs import RunResult
from nexus_events.events.specs import RepoSpec
from nexus_events.events.spend import RunSpend, ScopeStanding, StandingState
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_events.transport.run_requests import request_run
from nexus_testing.polling import eventually

from .conftest import OPERATE_TOKEN, READ_TOKEN, Browserless, Clients
from .flow_fixtures import AGENT_YAML
from .spend_double import SpendDouble, line, spend

__all__ = ["spend"]  # the spend double's fixture


async def _started(bus: Bus, core: CoreApp, run_id: str, repo: RepoSpec | None = None) -> None:
    """A run of the implementer that core assembled (`prepared`) and a runner started."""
    await apply_agent(bus, AGENT_YAML)
    await eventually(core.catalog_fresh, what="catalog applied")
    request = RunRequested(agent_id="implementer", input="fix it", repo=repo)
    await request_run(bus, run_id, request, source="t")

    async def prepared() -> bool:
        filter_subject = subjects.run_events_filter(run_id, RunEvent.PREPARED)
        return any([d async for d in bus.replay(RUNS, filter_subject=filter_subject)])

    await eventually(prepared, what="prepared")
    await bus.publish(subjects.run_event(run_id, RunStarted), RunStarted())


async def _page(client: Browserless, run_id: str, until: str) -> str:
    async def page() -> str:
        status, text = await client.get(f"/runs/{run_id}")
        return text if status == 200 else ""

    return str(await eventually(page, lambda t: until in t, what=f"{until!r} on the run page"))


async def test_the_timeline_shows_every_event_poison_included_and_the_waiting_approval(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    run_id = "run-page-1"
    await _started(bus, core, run_id)
    await bus.publish(
        subjects.run_event(run_id, RunTurn), RunTurn(turn=1, model="m", cost_usd=0.25)
    )
    called = ToolCalled(turn=1, call_id="c1", tool="shell", arguments={"command": "make test"})
    await bus.publish(subjects.run_event(run_id, ToolCalled), called)
    result = ToolResult(turn=1, call_id="c1", tool="shell", ok=True, output="2 passed")
    await bus.publish(subjects.run_event(run_id, ToolResult), result)
    await bus.nc.publish(subjects.run_event(run_id, RunEvent.TURN), b"{not json")
    await bus.nc.flush()
    asked = ApprovalRequested(
        approval_id="ap-1", tool="git_push", summary="push nexus/run-page-1",
        expires_at=datetime.now(UTC) + timedelta(hours=1),
    )  # fmt: skip
    await bus.publish(subjects.run_event(run_id, ApprovalRequested), asked)
    await bus.publish(
        subjects.run_log(run_id), LogLine(seq=1, stream="stdout", text="collected 2 items")
    )
    operator = await clients()
    await operator.login(OPERATE_TOKEN)
    page = await _page(operator, run_id, RunStatus.AWAITING_APPROVAL.value)
    assert "make test" in page
    assert "2 passed" in page
    assert 'class="ev turn poison"' in page
    assert "{not json" in page
    assert "collected 2 items" in page
    assert 'action="/runs/run-page-1/approvals/ap-1"' in page
    assert (
        'value="approve" >' in page
        or 'value="approve" \n' in page
        or "disabled" not in (page.split('data-approval="ap-1"', 1)[1].split("</form>", 1)[0])
    )
    reader = await clients()
    await reader.login(READ_TOKEN)
    _, read_page = await reader.get(f"/runs/{run_id}")
    form = read_page.split('data-approval="ap-1"', 1)[1].split("</form>", 1)[0]
    assert "disabled" in form
    assert 'id="cancel-run" class="danger" disabled' in read_page


async def test_cancel_is_operate_only_and_publishes_the_request_once(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    run_id = "run-page-2"
    await _started(bus, core, run_id)
    reader, operator = await clients(), await clients()
    await reader.login(READ_TOKEN)
    await operator.login(OPERATE_TOKEN)
    await _page(operator, run_id, RunStatus.RUNNING.value)
    await reader.get(f"/runs/{run_id}")
    status, _ = await reader.post(f"/runs/{run_id}/cancel", {"csrf": reader.csrf})
    assert status == 403
    status, _ = await operator.post(f"/runs/{run_id}/cancel", {"csrf": "forged"})
    assert status == 403
    status, _ = await operator.post(
        f"/runs/{run_id}/cancel", {"csrf": operator.csrf, "reason": "stop"}, allow_redirects=False
    )
    assert status == 303
    cancels = [
        d.event
        async for d in bus.replay(RUNS, filter_subject=subjects.run_events_filter(run_id))
        if isinstance(d.event, CancelRequested)
    ]
    assert [(c.reason, c.requested_by) for c in cancels] == [("stop", "console:oper")]


async def test_unknown_and_malformed_runs_are_404_pages(core: CoreApp, clients: Clients) -> None:
    client = await clients()
    await client.login(READ_TOKEN)
    status, page = await client.get("/runs/no-such-run")
    assert status == 404
    assert "no run" in page
    status, _ = await client.get("/runs/bad.id*")
    assert status == 404


async def test_new_events_and_log_lines_arrive_live(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    run_id = "run-page-3"
    await _started(bus, core, run_id)
    client = await clients()
    await client.login(READ_TOKEN)
    page = await _page(client, run_id, RunStatus.RUNNING.value)
    since = page.split("since=", 1)[1].split('"', 1)[0]
    received: list[str] = []

    async def follow() -> None:
        url = f"{client.base}/live/runs/{run_id}?since={since}"
        async with client.http.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r:
            async for raw in r.content:
                received.append(raw.decode())
                text = "".join(received)
                if "live line" in text and 'class="status completed"' in text:
                    return

    task = asyncio.create_task(follow())
    await bus.publish(subjects.run_log(run_id), LogLine(seq=2, stream="stdout", text="live line"))
    await bus.publish(subjects.run_event(run_id, RunCompleted), RunCompleted())
    await asyncio.wait_for(task, 20)
    text = "".join(received)
    assert 'hx-swap-oob="beforeend:#timeline-body"' in text
    assert 'data-event="completed"' in text


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


async def test_the_diff_of_a_pushed_branch_against_its_base(
    bus: Bus, core: CoreApp, clients: Clients, tmp_path: Path
) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    _git(origin, "init", "--quiet", "-b", "main")
    (origin / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    _git(origin, "add", "-A")
    _git(origin, "commit", "--quiet", "-m", "calc")
    _git(origin, "checkout", "--quiet", "-b", "nexus/run-page-4")
    (origin / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    _git(origin, "commit", "--quiet", "-am", "fix add")
    _git(origin, "checkout", "--quiet", "main")
    run_id = "run-page-4"
    await _started(bus, core, run_id, RepoSpec(url=str(origin), ref="main"))
    done = RunResult(summary="fixed", branch="nexus/run-page-4", pushed=True)
    await bus.publish(subjects.run_event(run_id, RunCompleted), RunCompleted(result=done))
    client = await clients()
    await client.login(READ_TOKEN)
    await _page(client, run_id, "(pushed)")
    status, fragment = await client.get(f"/runs/{run_id}/diff")
    assert status == 200
    assert "calc.py" in fragment
    assert "-    return a - b" in fragment
    assert "+    return a + b" in fragment
    not_pushed = "run-page-5"
    await _started(bus, core, not_pushed, RepoSpec(url=str(origin)))
    await _page(client, not_pushed, RunStatus.RUNNING.value)
    _, fragment = await client.get(f"/runs/{not_pushed}/diff")
    assert "not pushed" in fragment


async def test_the_runs_team_and_spend_against_each_scope(
    bus: Bus, core: CoreApp, clients: Clients, spend: SpendDouble
) -> None:
    await _started(bus, core, "run_sp1")
    usage = line("run_sp1", 0.5)
    spend.runs["run_sp1"] = RunSpend(
        run_id="run_sp1",
        team="alpha",
        usage=usage,
        waiting_for="budget alpha-monthly: team:alpha month 2026-11 reached; asking",
        scopes=[
            ScopeStanding(
                budget_id="alpha-monthly", instance="team:alpha", period=BudgetPeriod.MONTH,
                bucket="2026-11", on_exceed=OnExceed.ASK, state=StandingState.ASKING,
                spent_cost_usd=31.2, reserved_cost_usd=0.5, limit_cost_usd=50.0,
                ask_id="budget-ask-00000000000000000001",
            ),
        ],
    )  # fmt: skip
    client = await clients()
    await client.login(READ_TOKEN)
    page = await _page(client, "run_sp1", 'id="spend"')
    assert '<dd id="run-team">alpha</dd>' in page
    assert "waits: budget alpha-monthly: team:alpha month 2026-11 reached; asking" in page
    row = page.split('data-budget="alpha-monthly"', 1)[1].split("</tr>", 1)[0]
    assert "team:alpha" in row
    assert "2026-11" in row
    assert "$31.20 spent, $0.50 reserved of $50.00" in row
    assert 'href="/runs/budget-ask-00000000000000000001"' in row


async def test_the_run_page_without_a_spend_service_says_so(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await _started(bus, core, "run_sp2")
    client = await clients()
    await client.login(READ_TOKEN)
    page = await _page(client, "run_sp2", 'id="spend"')
    assert "Not known: nothing answers nexus.spend.v1.runs" in page
    assert "fix it" in page  # the rest of the run is there
