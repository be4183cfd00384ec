"""Eval runs end to end on real NATS, PostgreSQL and core: a suite of 5 cases x 2 revisions x 3
trials requests the right case runs and reports the pass rates the scripted revisions produce;
a restart mid-way requests nothing twice; an eval run committed while the other feed hands
off is still decided; bad requests fail with one line; the queries."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import CATALOG, EVALS
from nexus_events.events import RunRequested
from nexus_events.events.evals import (
    EvalAccepted,
    EvalCaseGraded,
    EvalCaseStarted,
    EvalCompleted,
    EvalFailed,
    EvalListReply,
)
from nexus_events.events.runs import Origin
from nexus_events.transport.bus import Bus
from nexus_events.transport.projection import Conn
from nexus_testing import eventually

from nexus_lab.app import LabApp
from nexus_lab.store import LabProjection

from .harness import (
    STARTED,
    Script,
    ScriptedRunner,
    apply_agents,
    apply_suite,
    query,
    request_eval,
    settings,
    stored_eval_events,
    stored_requests,
    wait_report,
)

Labs = Callable[[], Awaitable[LabApp]]
Runners = Callable[[Script], Awaitable[ScriptedRunner]]
CASES = ["a", "b", "c", "d", "e"]
SUITE = {
    "id": "five",
    "trials": 3,
    "graders": [{"kind": "details_match", "field": "ok", "equals": True}],
    "cases": [{"id": c, "input": f"do {c}", "repo": "/srv/repo"} for c in CASES],
}
# Revision 1 passes cases a and b; revision 2 also c and d: pass rates 0.4 and 0.8.
PASSING = {1: {"a", "b"}, 2: {"a", "b", "c", "d"}}


def scripted(request: RunRequested) -> dict[str, Any]:
    revision = request.agent_revision or 0
    return {"ok": request.labels["case"] in PASSING.get(revision, set())}


async def test_five_cases_two_revisions_three_trials(
    bus: Bus, core: CoreApp, labs: Labs, runner: Runners
) -> None:
    await apply_agents(bus, 2)
    await apply_suite(bus, SUITE)
    scripted_runner = await runner(scripted)
    await labs()
    await request_eval(
        bus, "ev5", suite="five", agents=["implementer@1", "implementer@2"], concurrency=4,
        requested_by="ana",
    )  # fmt: skip
    report = await wait_report(bus, "ev5", "completed", within=90)

    requests = scripted_runner.requests
    assert len(requests) == 30
    seen = set()
    for run_id, req in requests.items():
        labels = req.labels
        assert labels["eval_run"] == "ev5"
        assert req.origin == Origin.LAB
        assert req.agent_id == "implementer"
        assert labels["revision"] == str(req.agent_revision)
        assert req.input == f"do {labels['case']}"
        assert req.repo is not None
        assert req.repo.url == "/srv/repo"
        seen.add((labels["case"], req.agent_revision, labels["trial"]))
        assert len(run_id) <= 128
    assert seen == {(c, r, str(t)) for c in CASES for r in (1, 2) for t in (1, 2, 3)}
    assert scripted_runner.most_live <= 4

    assert (report.suite, report.suite_revision, report.planned, report.graded) == (
        "five", 1, 30, 30,
    )  # fmt: skip
    assert report.requested_by == "ana"
    by_rev = {s.revision: s for s in report.revisions}
    assert (by_rev[1].graded, by_rev[1].passed, by_rev[1].pass_rate) == (15, 6, 0.4)
    assert (by_rev[2].graded, by_rev[2].passed, by_rev[2].pass_rate) == (15, 12, 0.8)
    assert by_rev[1].ci_low < 0.4 < by_rev[1].ci_high
    assert by_rev[2].cost_usd == 0.01
    assert by_rev[2].tokens == 110
    # Wall time: from the request core recorded to the ending, per case run.
    assert 0 < by_rev[2].wall_seconds < 120
    assert report.flipped == ["c", "d"]
    cell = next(c for c in report.cases if (c.case, c.revision) == ("c", 1))
    assert (cell.trials, cell.passed, len(cell.runs)) == (3, 0, 3)
    assert "ok" in cell.reasons[0]
    events = await stored_eval_events(bus, "ev5")
    assert sum(isinstance(e, EvalAccepted) for e in events) == 1
    assert sum(isinstance(e, EvalCaseStarted) for e in events) == 30
    assert sum(isinstance(e, EvalCaseGraded) for e in events) == 30
    assert sum(isinstance(e, EvalCompleted) for e in events) == 1


async def test_a_restart_mid_way_requests_nothing_twice(
    bus: Bus, core: CoreApp, labs: Labs, runner: Runners
) -> None:
    await apply_agents(bus, 2)
    await apply_suite(bus, SUITE)
    ended: list[str] = []

    def first_half(request: RunRequested) -> dict[str, Any] | None:
        if len(ended) >= 8:
            return None  # hold the rest until the lab restarted
        ended.append(request.labels["case"])
        return scripted(request)

    scripted_runner = await runner(first_half)
    lab = await labs()
    await request_eval(bus, "evr", suite="five", agents=["implementer@1", "implementer@2"])
    await eventually(
        lambda: _graded(bus, "evr"), lambda n: n >= 8, within=60, what="8 cases graded"
    )
    await eventually(lambda: _held(scripted_runner), lambda n: n >= 1, within=30, what="runs held")
    await lab.stop()
    await labs()
    await scripted_runner.release(scripted)
    # The restarted lab goes on with the held runs' endings and the cases not started yet.
    report = await wait_report(bus, "evr", "completed", within=90)
    assert report.graded == 30
    assert {s.revision: s.pass_rate for s in report.revisions} == {1: 0.4, 2: 0.8}
    stored = await stored_requests(bus)
    assert len(stored) == 30
    assert set(stored.values()) == {1}  # nothing requested twice
    events = await stored_eval_events(bus, "evr")
    graded = [e for e in events if isinstance(e, EvalCaseGraded)]
    assert len(graded) == len({(e.case, e.revision, e.trial) for e in graded}) == 30


async def _graded(bus: Bus, eval_run_id: str) -> int:
    return sum(isinstance(e, EvalCaseGraded) for e in await stored_eval_events(bus, eval_run_id))


async def _held(r: ScriptedRunner) -> int:
    return len(r.held)


class HeldProjection(LabProjection):
    """Holds the transaction of the first batch with an eval run's event open (after its
    rows are written) until released, so the other feed can commit meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        await super().apply(conn, schema, batch)
        if not self.holding.is_set() and any("eval_run_id" in d.address.ids for d in batch):
            self.holding.set()
            await self.release.wait()


async def test_an_eval_run_committed_while_the_other_feed_hands_off_is_decided(
    bus: Bus, core: CoreApp, labs: Labs, runner: Runners, pg_pool: asyncpg.Pool[Any]
) -> None:
    """NEXUS_CATALOG and NEXUS_EVALS are followed concurrently. A suite applied while the
    eval run's batch is still in its transaction must not make the engine look at the eval
    run before it is stored and never again (CI saw it stay `requested`)."""
    await apply_agents(bus, 1)
    await runner(lambda _: {"done": True})
    app = LabApp(settings(), bus=bus, pool=pg_pool)
    app.projection = held = HeldProjection()
    STARTED.append(app)  # stopped by the `labs` fixture, as `labs()` would have
    await app.start()
    await eventually(lambda: _runner_of(app), what="the lab leads")
    await request_eval(bus, "held", suite="one", agents=["implementer@1"])
    await asyncio.wait_for(held.holding.wait(), 10)
    await apply_suite(bus, {"id": "one", "cases": [{"id": "only", "input": "do it"}]})
    lab = await _runner_of(app)
    assert lab is not None
    await lab.wait_until(CATALOG, 2)  # the suite's batch committed and was handed off
    engine = app.engine
    assert engine is not None
    passes = engine._passes.steps
    await eventually(lambda: _at(engine._passes.steps >= passes + 2), what="two engine passes")
    held.release.set()
    await lab.wait_until(EVALS, 1)
    report = await wait_report(bus, "held", "completed", within=60)
    assert (report.planned, report.graded) == (1, 1)


async def _at(value: bool) -> bool:
    return value


async def _runner_of(app: LabApp) -> Any:
    return app.runner


async def test_unknown_suite_agent_revision_and_new_token(
    bus: Bus, core: CoreApp, labs: Labs, runner: Runners
) -> None:
    await apply_agents(bus, 1)
    await apply_suite(bus, SUITE)
    await labs()
    await request_eval(bus, "nosuite", suite="missing", agents=["implementer@1"])
    await request_eval(bus, "norev", suite="five", suite_revision=3, agents=["implementer@1"])
    await request_eval(bus, "noagent", suite="five", agents=["implementer@1", "implementer@9"])
    for eid, reason, message in (
        ("nosuite", "unknown_suite", "no eval suite missing"),
        ("norev", "unknown_suite", "no eval suite five revision 3"),
        ("noagent", "unknown_agent", "no agent revision implementer@9"),
    ):
        report = await wait_report(bus, eid, "failed")
        assert report.message == message
        failed = [e for e in await stored_eval_events(bus, eid) if isinstance(e, EvalFailed)]
        assert [(f.reason, f.message) for f in failed] == [(reason, message)]
    assert await stored_requests(bus) == {}

    # `new`: the lab makes up the id and re-publishes the request under it.
    await request_eval(bus, subjects.NEW_RUN_TOKEN, suite="missing", agents=["implementer@1"])
    listed = await eventually(
        lambda: _list(bus, suite="missing"), lambda r: len(r.evals) == 2, what="new eval run"
    )
    fresh = next(e for e in listed.evals if e.eval_run_id != "nosuite")
    assert fresh.eval_run_id.startswith("eval-")
    await wait_report(bus, fresh.eval_run_id, "failed")


async def test_queries(bus: Bus, core: CoreApp, labs: Labs) -> None:
    await labs()
    unknown = await query(bus, subjects.LAB_EVALS_GET, {"eval_run_id": "nope"})
    assert (unknown.error_code, unknown.message) == ("404", "no eval run 'nope'")
    bad = await query(bus, subjects.LAB_EVALS_LIST, {"limit": 0})
    assert bad.error_code == "400"
    for n in range(3):
        await request_eval(bus, f"q{n}", suite="s" if n else "t", agents=["implementer@1"])
    for n in range(3):
        await wait_report(bus, f"q{n}", "failed")
    everything = await _list(bus)
    assert [e.eval_run_id for e in everything.evals] == ["q2", "q1", "q0"]  # newest first
    assert [e.eval_run_id for e in (await _list(bus, suite="s", limit=1)).evals] == ["q2"]


async def _list(bus: Bus, **body: Any) -> EvalListReply:
    reply = await query(bus, subjects.LAB_EVALS_LIST, body)
    assert reply.error_code is None, reply.message
    return EvalListReply.model_validate(reply.data)
