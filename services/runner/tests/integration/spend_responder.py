"""A stand-in for the spend service's reservations on the real NATS test server: it answers
``nexus.spend.v1.reserve.*`` with the contract's `SpendVerdict` and records what it was asked,
with how many model calls the fake model had received at that moment."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nexus_events.contract import subjects
from nexus_events.events.budgets import BudgetPeriod, OnExceed
from nexus_events.events.spend import (
    ScopeStanding,
    SpendDecision,
    SpendReserve,
    SpendVerdict,
    StandingState,
)
from tests.fakes.openai_server import FakeOpenAI

# The scope every refusal here names, as docs/spend.md's example does.
SCOPE = ScopeStanding(
    budget_id="alpha-monthly",
    instance="team:alpha",
    period=BudgetPeriod.MONTH,
    bucket="2026-11",
    on_exceed=OnExceed.ASK,
    state=StandingState.ASKING,
    spent_cost_usd=50.02,
    limit_cost_usd=50.0,
)
STOP_MESSAGE = "budget alpha-monthly: team:alpha month 2026-11 reached ($50.02 of $50.00)"


def granted() -> SpendVerdict:
    return SpendVerdict(decision=SpendDecision.GRANTED, scopes=[SCOPE])


def stop() -> SpendVerdict:
    return SpendVerdict(
        decision=SpendDecision.STOP, scopes=[SCOPE], blocking=SCOPE, message=STOP_MESSAGE
    )


def wait() -> SpendVerdict:
    return SpendVerdict(
        decision=SpendDecision.WAIT,
        scopes=[SCOPE],
        blocking=SCOPE,
        message="budget alpha-monthly reached: asking team:alpha's approvers to extend it",
        ask_run_id="budget-ask-alpha",
        ask_approval_id="budget-ask-alpha",
    )


@dataclass(frozen=True)
class Asked:
    run_id: str
    request: SpendReserve
    model_calls: int  # requests the fake model had received when this was asked


# (the request, how many asks came before it) -> the verdict
Answer = Callable[[SpendReserve, int], SpendVerdict]


@dataclass
class SpendResponder:
    """Answers every reservation with `answer`; use with ``async with``."""

    nc: Client
    llm: FakeOpenAI
    answer: Answer = field(default=lambda request, before: granted())
    asked: list[Asked] = field(default_factory=list)
    _sub: Subscription | None = None

    async def __aenter__(self) -> SpendResponder:
        self._sub = await self.nc.subscribe(subjects.SPEND_RESERVE, cb=self._on_request)
        await self.nc.flush()  # subscribed on the server before a runner asks
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    async def _on_request(self, msg: Msg) -> None:
        request = SpendReserve.model_validate_json(msg.data)
        verdict = self.answer(request, len(self.asked))
        run_id = msg.subject.rsplit(".", 1)[-1]
        self.asked.append(Asked(run_id, request, len(self.llm.requests)))
        await msg.respond(verdict.model_dump_json().encode())
