"""The lab pages: eval runs newest first, one eval run's report (pass rate with its interval,
the cases by revision, the flipped ones, each trial's run linked), live from NEXUS_EVALS, and
a 503 naming the query when the lab does not answer.

The lab service has not landed beside the console yet: `nexus.lab.v1.evals.get|list` are
answered here by `LabDouble`, a test double of that sibling service: a real nats.micro service
on the test's real NATS, built with the same `nexus_events.transport.micro` helpers every
Nexus query uses, validating requests as the contract's `EvalGetRequest`/`EvalListRequest`
and answering the contract's `EvalReport`/`EvalListReply`. Swap it for the real lab service
once it is merged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from nexus_events.contract import subjects
from nexus_events.contract.subjects import Family
from nexus_events.events.evals import (
    CaseCell,
    EvalCaseGraded,
    EvalEvent,
    EvalFailed,
    EvalGetRequest,
    EvalListReply,
    EvalListRequest,
    EvalReport,
    RevisionSummary,
)
from nexus_events.transport.bus import Bus
from nexus_events.transport.micro import QueryError, endpoint_handler, start_service, stop_service

from nexus_console.live.hub import FOLLOWED

from .conftest import READ_TOKEN, Clients


class LabDouble:
    """Answers the lab's two queries from reports the test sets (newest last in `reports`)."""

    def __init__(self) -> None:
        self.reports: dict[str, EvalReport] = {}
        self.asked: list[EvalListRequest] = []

    async def get(self, request: EvalGetRequest) -> EvalReport:
        report = self.reports.get(request.eval_run_id)
        if report is None:
            raise QueryError(404, f"no eval run {request.eval_run_id}")
        return report

    async def list(self, request: EvalListRequest) -> EvalListReply:
        self.asked.append(request)
        newest_first = [
            r for r in reversed(self.reports.values()) if request.suite in (None, r.suite)
        ]
        return EvalListReply(evals=newest_first[: request.limit])


@pytest.fixture
async def lab(bus: Bus) -> AsyncIterator[LabDouble]:
    double = LabDouble()
    service = await start_service(
        bus.nc,
        "lab-double",
        "the lab's eval queries, answered by the console's tests",
        [
            ("evals-get", subjects.LAB_EVALS_GET, endpoint_handler(EvalGetRequest, double.get)),
            ("evals-list", subjects.LAB_EVALS_LIST, endpoint_handler(EvalListRequest, double.list)),
        ],
    )
    try:
        yield double
    finally:
        await stop_service(service)


def _summary(revision: int, passed: int, graded: int, low: float, high: float) -> RevisionSummary:
    return RevisionSummary(
        agent_id="implementer", revision=revision, graded=graded, passed=passed,
        pass_rate=passed / graded, ci_low=low, ci_high=high, cost_usd=0.0125,
        tokens=1530, turns=4.5, wall_seconds=12.25,
    )  # fmt: skip


def _cell(case: str, revision: int, passed: int, runs: list[str], reason: str = "") -> CaseCell:
    return CaseCell(
        case=case, agent_id="implementer", revision=revision, trials=len(runs), passed=passed,
        runs=runs, reasons=[reason] if reason else [], cost_usd=0.01, tokens=1500.0,
        turns=4.0, wall_seconds=11.0,
    )  # fmt: skip


def _report(eval_run_id: str, suite: str = "calc") -> EvalReport:
    return EvalReport(
        eval_run_id=eval_run_id, suite=suite, suite_revision=2, status="completed",
        planned=12, graded=12, requested_by="cli:alice",
        revisions=[_summary(3, 3, 6, 0.19, 0.81), _summary(4, 6, 6, 0.61, 1.0)],
        cases=[
            _cell("add", 3, 0, ["ev1-add-3-1", "ev1-add-3-2", "ev1-add-3-3"],
                  "tests_pass: the tests failed"),
            _cell("add", 4, 3, ["ev1-add-4-1", "ev1-add-4-2", "ev1-add-4-3"]),
            _cell("sub", 3, 3, ["ev1-sub-3-1", "ev1-sub-3-2", "ev1-sub-3-3"]),
            _cell("sub", 4, 3, ["ev1-sub-4-1", "ev1-sub-4-2", "ev1-sub-4-3"]),
        ],
        flipped=["add"],
    )  # fmt: skip


async def test_eval_runs_are_listed_newest_first_and_filtered_by_suite(
    lab: LabDouble, clients: Clients
) -> None:
    lab.reports["ev-old"] = _report("ev-old")
    lab.reports["ev-other"] = _report("ev-other", suite="docs")
    lab.reports["ev-new"] = _report("ev-new")
    client = await clients()
    await client.login(READ_TOKEN)
    status, page = await client.get("/lab")
    assert status == 200
    assert page.index('href="/lab/ev-new"') < page.index('href="/lab/ev-other"')
    assert page.index('href="/lab/ev-other"') < page.index('href="/lab/ev-old"')
    assert "implementer@3: 50%" in page
    assert "implementer@4: 100%" in page
    assert 'href="/lab" class="here"' in page  # the navigation entry
    status, page = await client.get("/lab?suite=docs")
    assert status == 200
    assert 'href="/lab/ev-other"' in page
    assert 'href="/lab/ev-new"' not in page
    assert lab.asked[-1].suite == "docs"
    status, page = await client.get("/lab?limit=0")
    assert status == 400
    assert "limit" in page


async def test_the_report_draws_each_interval_and_links_every_trial(
    lab: LabDouble, clients: Clients
) -> None:
    lab.reports["ev-1"] = _report("ev-1")
    client = await clients()
    await client.login(READ_TOKEN)
    status, page = await client.get("/lab/ev-1")
    assert status == 200
    # Revision 4: 100 % passed, interval 61-100 %: its bar spans the whole axis (420 units
    # from x=150) and its whiskers run from 150 + 0.61 * 420 to the axis' end.
    four = page.split('data-revision="implementer@4"', 1)[1].split("</g>", 1)[0]
    assert 'width="420.0"' in four
    assert 'x1="406.2" x2="570.0"' in four
    three = page.split('data-revision="implementer@3"', 1)[1].split("</g>", 1)[0]
    assert 'width="210.0"' in three
    assert "3/6 passed (50%), 95% interval 19-81%" in three
    # The case grid: the flipped case marked, each trial's run linked, the failure's reason.
    row = page.split('id="case-add"', 1)[1].split("</tr>", 1)[0]
    assert 'id="case-add" class="case flipped"' in page
    assert 'href="/runs/ev1-add-3-2"' in row
    assert "tests_pass: the tests failed" in row
    assert 'id="case-sub" class="case"' in page
    assert "$0.0125" in page  # cost per run of a revision
    assert "<td>12.2 s</td>" in page  # wall per run (12.25 to one decimal, half to even)


async def test_an_unknown_or_malformed_eval_run_is_a_404(lab: LabDouble, clients: Clients) -> None:
    client = await clients()
    await client.login(READ_TOKEN)
    status, page = await client.get("/lab/ev-missing")
    assert status == 404
    assert "no eval run ev-missing" in page
    status, _ = await client.get("/lab/bad.id*")
    assert status == 404


async def test_a_lab_that_does_not_answer_is_a_503_naming_the_query(
    console: object, clients: Clients
) -> None:
    client = await clients()
    await client.login(READ_TOKEN)
    for path, subject in (("/lab", subjects.LAB_EVALS_LIST), ("/lab/ev-1", subjects.LAB_EVALS_GET)):
        status, page = await client.get(path)
        assert status == 503, path
        assert f"nothing answers {subject}" in page


async def test_a_reply_that_is_no_report_is_a_502_not_a_crash(bus: Bus, clients: Clients) -> None:
    async def broken(request: EvalGetRequest) -> dict[str, object]:
        return {"eval_run_id": request.eval_run_id, "suite": "calc", "status": "exploded"}

    service = await start_service(
        bus.nc, "lab-broken", "a lab answering nonsense",
        [("evals-get", subjects.LAB_EVALS_GET, endpoint_handler(EvalGetRequest, broken))],
    )  # fmt: skip
    try:
        client = await clients()
        await client.login(READ_TOKEN)
        status, page = await client.get("/lab/ev-1")
        assert status == 502
        assert "status" in page
    finally:
        await stop_service(service)


async def test_the_report_follows_its_eval_events_live(
    bus: Bus, lab: LabDouble, clients: Clients
) -> None:
    assert Family.EVAL in FOLLOWED
    running = _report("ev-live").model_copy(update={"status": "running", "graded": 11})
    lab.reports["ev-live"] = running
    client = await clients()
    await client.login(READ_TOKEN)
    status, page = await client.get("/lab/ev-live")
    assert status == 200
    assert 'class="status running"' in page
    since = page.split("since=", 1)[1].split('"', 1)[0]
    received: list[str] = []

    async def follow() -> None:
        url = f"{client.base}/live/lab?id=ev-live&since={since}"
        async with client.http.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r:
            async for raw in r.content:
                received.append(raw.decode())
                text = "".join(received)
                if "event: stale" in text and "\n\n" in text.split("event: stale", 1)[1]:
                    return  # one whole record

    task = asyncio.create_task(follow())
    # Another eval run's event is not this page's; its own graded case is.
    await bus.publish(
        subjects.eval_event("ev-other", EvalEvent.FAILED),
        EvalFailed(reason="unknown_suite", message="no suite calc"),
    )
    lab.reports["ev-live"] = running.model_copy(update={"status": "completed", "graded": 12})
    graded = EvalCaseGraded(
        case="sub", agent_id="implementer", revision=4, trial=3, run_id="ev1-sub-4-3",
        passed=True, status="completed",
    )  # fmt: skip
    await bus.publish(subjects.eval_event("ev-live", EvalEvent.CASE_GRADED), graded)
    await asyncio.wait_for(task, 20)
    assert f"data: {EvalEvent.FAILED}" not in "".join(received)
    assert "data: case_graded" in "".join(received)
    status, fragment = await client.get(
        "/lab/ev-live", headers={"HX-Request": "true", "HX-Target": "report"}
    )
    assert status == 200
    assert "<html" not in fragment
    assert 'class="status completed"' in fragment
