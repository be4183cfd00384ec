"""The budget check before dispatch on a real NATS, with a stand-in for the spend service
answering `nexus.spend.v1.admit.<run_id>` (the spend service itself is built elsewhere)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

import pytest
from nats.aio.msg import Msg
from nexus_events.contract import subjects
from nexus_events.events import (
    Reason,
    RunBudgetPaused,
    RunBudgetResumed,
    RunCompleted,
    RunFailed,
    RunQueued,
    RunStarted,
)
from nexus_events.events.spend import SpendAdmit, SpendDecision, SpendVerdict
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus

from tests.support.noop_runtime import NoopRuntime

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, publish, publish_prepared, run_events

REACHED = "budget alpha-monthly: team:alpha month 2026-11 reached ($50.02 of $50.00)"


class StandInSpend:
    """Answers admission checks with the verdict set per run (granted by default)."""

    def __init__(self) -> None:
        self.verdicts: dict[str, SpendVerdict] = {}
        self.asked: Counter[str] = Counter()

    def say(self, run_id: str, decision: SpendDecision, message: str = "") -> None:
        self.verdicts[run_id] = SpendVerdict(decision=decision, message=message)

    async def answer(self, msg: Msg) -> None:
        run_id = msg.subject.rsplit(".", 1)[-1]
        SpendAdmit.model_validate_json(msg.data)  # the scheduler sends the contract's body
        self.asked[run_id] += 1
        verdict = self.verdicts.get(run_id, SpendVerdict(decision=SpendDecision.GRANTED))
        await msg.respond(verdict.model_dump_json().encode())


@pytest.fixture
async def spend(bus: Bus) -> AsyncIterator[StandInSpend]:
    stand_in = StandInSpend()
    sub = await bus.nc.subscribe(subjects.SPEND_ADMIT, cb=stand_in.answer)
    await bus.nc.flush()
    yield stand_in
    await sub.unsubscribe()


async def names(bus: Bus, event: str) -> list[str]:
    return [rid for rid, _ in await run_events(bus, event)]


async def _true(value: bool) -> bool:
    return value


async def test_a_run_waiting_on_a_budget_is_queued_with_the_reason_then_dispatched(
    make_app: AppFactory, bus: Bus, spend: StandInSpend, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime, max_concurrent_runs=1, budget_recheck_seconds=5)
    assert app.service is not None
    svc = app.service
    spend.say("held", SpendDecision.WAIT, REACHED)
    await publish_prepared(bus, [config("held"), config("behind")])

    # The held run gives its slot back: the run behind it is dispatched instead.
    await eventually(lambda: _dispatched_exactly(bus, ["behind"]), what="behind dispatched")
    budget_queued = [
        (rid, ev)
        for rid, ev in await run_events(bus, "queued")
        if isinstance(ev, RunQueued) and ev.limit == "budget"
    ]
    assert budget_queued == [
        ("held", RunQueued(position=1, limit="budget", waiting_for=REACHED)),
    ]
    assert "held" not in runtime.started

    # Asked again after the recheck time, the same reason is not reported again.
    asked = spend.asked["held"]
    await publish(bus, "behind", RunCompleted())
    await eventually(lambda: _true(spend.asked["held"] > asked), what="asked on a run's end")
    asked = spend.asked["held"]
    clock.advance(6)
    await svc.tick()
    await eventually(lambda: _true(spend.asked["held"] > asked), what="asked after recheck")
    await svc.drain()
    assert await _queued_reasons(bus, 1)

    # A new reason is reported; then the budget is extended and the run dispatched.
    spend.say("held", SpendDecision.WAIT, "budget alpha-monthly: asking team:alpha for $10")
    clock.advance(6)
    await svc.tick()
    await eventually(lambda: _queued_reasons(bus, 2), what="second reason reported")
    spend.say("held", SpendDecision.GRANTED)
    clock.advance(6)
    await svc.tick()
    await eventually(lambda: _dispatched_exactly(bus, ["behind", "held"]), what="held dispatched")
    assert runtime.started == ["behind", "held"]
    assert await run_events(bus, "failed") == []


async def test_a_run_of_a_closed_budget_fails_budget_exceeded(
    make_app: AppFactory, bus: Bus, spend: StandInSpend
) -> None:
    runtime = NoopRuntime()
    await make_app(runtime, max_concurrent_runs=1)
    spend.say("refused", SpendDecision.STOP, REACHED)
    await publish_prepared(bus, [config("refused"), config("next")])

    async def refused_failed() -> RunFailed | None:
        failed = [ev for rid, ev in await run_events(bus, "failed") if rid == "refused"]
        return failed[0] if failed and isinstance(failed[0], RunFailed) else None

    failed = await eventually(refused_failed, what="refused failed")
    assert failed.reason == Reason.BUDGET_EXCEEDED
    assert failed.message == REACHED
    await eventually(lambda: _dispatched_exactly(bus, ["next"]), what="next dispatched")
    assert runtime.started == ["next"]


async def test_with_no_spend_service_answering_runs_are_dispatched(
    make_app: AppFactory, bus: Bus
) -> None:
    runtime = NoopRuntime()
    await make_app(runtime, max_concurrent_runs=2, budget_admission_timeout_seconds=0.5)
    await publish_prepared(bus, [config("r1"), config("r2")])
    await eventually(lambda: _dispatched_exactly(bus, ["r1", "r2"]), what="both dispatched")
    assert await run_events(bus, "failed") == []


async def test_a_run_paused_on_a_budget_gives_its_slot_back_until_resumed(
    make_app: AppFactory, bus: Bus, spend: StandInSpend
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime, max_concurrent_runs=1)
    assert app.service is not None
    await publish_prepared(bus, [config("first"), config("second"), config("third")])
    await eventually(lambda: _dispatched_exactly(bus, ["first"]), what="first dispatched")
    await publish(bus, "first", RunStarted())
    pause = RunBudgetPaused(
        budget_id="alpha-monthly", instance="team:alpha", bucket="2026-11", turn=2, message="x"
    )
    await publish(bus, "first", pause)
    await eventually(lambda: _dispatched_exactly(bus, ["first", "second"]), what="second")
    await publish(bus, "first", RunBudgetResumed(budget_id="alpha-monthly", turn=2))
    await eventually(lambda: _true(app.service.state.active_total == 2), what="slot taken again")
    await publish(bus, "second", RunCompleted())
    # first holds the one slot again: third waits until first ends.
    await eventually(lambda: _true("second" not in app.service.state.runs), what="second ended")
    await app.service.drain()
    assert await names(bus, "dispatched") == ["first", "second"]
    await publish(bus, "first", RunCompleted())
    await eventually(lambda: _dispatched_exactly(bus, ["first", "second", "third"]), what="third")


async def _dispatched_exactly(bus: Bus, expected: list[str]) -> bool:
    got = await names(bus, "dispatched")
    assert len(got) <= len(expected), f"dispatched {got}, expected {expected}"
    return got == expected


async def _queued_reasons(bus: Bus, n: int) -> bool:
    reasons = [
        ev.waiting_for
        for _, ev in await run_events(bus, "queued")
        if isinstance(ev, RunQueued) and ev.limit == "budget"
    ]
    assert len(reasons) <= n
    return len(reasons) == n
