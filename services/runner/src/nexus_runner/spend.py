"""The reservation before each model call (docs/spend.md): the spend service holds the call's
estimate against the run's budgets and answers granted, wait or stop; never a call unreserved.

`next_step` decides (pure), `SpendGate` asks and waits: the turn's call and a condensation's
summary call both go through `SpendGate.before_call` (the `LlmClient` hook), a replayed turn
served from a recording makes no call and so no reservation."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

import nats.errors
from nats.aio.client import Client
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunStatus
from nexus_events.events.base import Event
from nexus_events.events.runs import Reason, RunBudgetPaused, RunBudgetResumed
from nexus_events.events.spend import SpendDecision, SpendReserve, SpendVerdict
from nexus_events.runtime.clock import SleepingClock
from pydantic import ValidationError

from nexus_runner.budget import turn_cost
from nexus_runner.config import Price
from nexus_runner.context import upper_bound
from nexus_runner.control import RunControl
from nexus_runner.errors import RunStopped

log = logging.getLogger(__name__)

# How long one reservation may take to be answered: one PostgreSQL transaction on the spend
# service's side, so a silence this long is a service away (asked again, never skipped).
REPLY_TIMEOUT = 10.0
# A spend service nobody answers for is logged this often, not on every retry.
SILENCE_LOG_INTERVAL = 60.0
# The headers of a nats.micro error reply (the service answered, but could not decide).
_SERVICE_ERROR = "Nats-Service-Error"
_SERVICE_ERROR_CODE = "Nats-Service-Error-Code"


class Step(enum.Enum):
    """What the gate does after an answer (or its absence)."""

    GO = "go"  # granted: the call goes ahead
    STOP = "stop"  # the run ends budget_exceeded
    PAUSE = "pause"  # wait: publish budget_paused, then ask again later
    WAIT = "wait"  # wait, already paused: ask again later
    UNANSWERED = "unanswered"  # no verdict: ask again later, the call is not made meanwhile


def next_step(verdict: SpendVerdict | None, *, paused: bool) -> Step:
    """The step after `verdict` (None: nobody answered) while the run is `paused` or not."""
    if verdict is None:
        return Step.UNANSWERED
    if verdict.decision is SpendDecision.GRANTED:
        return Step.GO
    if verdict.decision is SpendDecision.STOP:
        return Step.STOP
    return Step.WAIT if paused else Step.PAUSE


def estimate(
    prices: Mapping[str, Price],
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    max_output_tokens: int,
) -> tuple[int, float]:
    """(tokens, USD) a call may cost at most: its prompt's upper bound plus the whole reply
    `max_output_tokens` allows, at the runner's price of `model` (0 unknown). An estimate at
    or above the real cost keeps a budget from being passed by more than the calls in flight
    (docs/spend.md, "The bound")."""
    # The bound the context manager checks before it loads a tokenizer: no tokenizer here
    # (loading one costs 0.3-1 s of CPU per runner, and most runs never need one).
    prompt = upper_bound(messages, tools)
    return prompt + max_output_tokens, turn_cost(prices, model, prompt, max_output_tokens)


def stopped(verdict: SpendVerdict) -> RunStopped:
    """The run's ending for a stop: failed budget_exceeded, naming the scope that refused."""
    scope = verdict.blocking
    message = verdict.message or (
        f"budget {scope.budget_id}: {scope.instance} {scope.period} {scope.bucket} reached"
        if scope is not None
        else "a budget covering the run was reached"
    )
    detail: dict[str, Any] = {}
    if scope is not None:
        detail = {"budget_id": scope.budget_id, "instance": scope.instance, "bucket": scope.bucket}
    return RunStopped(RunStatus.FAILED, Reason.BUDGET_EXCEEDED, message, detail)


def paused_event(verdict: SpendVerdict, turn: int) -> RunBudgetPaused:
    # A wait names the blocking scope (the contract says so); one that does not is still a
    # wait, shown as such rather than refused.
    scope = verdict.blocking
    return RunBudgetPaused(
        budget_id=scope.budget_id if scope else "unknown",
        instance=scope.instance if scope else "unknown",
        bucket=scope.bucket if scope else "unknown",
        turn=turn,
        message=verdict.message or "a budget covering the run was reached; its approvers are asked",
        ask_run_id=verdict.ask_run_id,
        ask_approval_id=verdict.ask_approval_id,
    )


class SpendGate:
    """One run's reservations, over the runner's own NATS connection (its credential may ask
    ``nexus.spend.v1.reserve.<its run id>`` only)."""

    def __init__(
        self,
        nc: Client,
        control: RunControl,
        publish: Callable[[Event], Awaitable[None]],
        flush: Callable[[], Awaitable[None]],
        *,
        prices: Mapping[str, Price],
        turn_of: Callable[[], int],
        retry_seconds: float,
        clock: SleepingClock,
        reply_timeout: float = REPLY_TIMEOUT,
    ) -> None:
        self.nc = nc
        self.control = control
        self.publish = publish
        self.flush = flush
        self.prices = prices
        self.turn_of = turn_of
        self.retry_seconds = retry_seconds
        self.clock = clock
        self.reply_timeout = reply_timeout
        self.subject = subjects.spend_reserve(control.run_id)
        self._silent_since: datetime | None = None
        self._logged_silence: datetime | None = None

    async def before_call(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        max_output_tokens: int,
    ) -> None:
        """Reserve the call about to be made (the `LlmClient` hook): returns once granted,
        raises `RunStopped` on a stop or a cancel."""
        tokens, cost = estimate(
            self.prices, model, messages, tools, max_output_tokens=max_output_tokens
        )
        request = SpendReserve(
            turn=max(self.turn_of(), 1), attempt=self.control.attempt, cost_usd=cost, tokens=tokens
        )
        await self.reserve(request)

    async def reserve(self, request: SpendReserve) -> None:
        """Ask until granted (or stopped): a wait publishes ``budget_paused`` once and
        ``budget_resumed`` when granted; silence is logged and asked again."""
        paused: RunBudgetPaused | None = None
        paused_at = self.clock.now()
        while True:
            self.control.stop_if_cancelled()
            verdict = await self._ask(request)
            step = next_step(verdict, paused=paused is not None)
            if step is Step.GO:
                if paused is not None:
                    waited = (self.clock.now() - paused_at).total_seconds()
                    await self.publish(
                        RunBudgetResumed(
                            budget_id=paused.budget_id,
                            turn=request.turn,
                            waited_seconds=max(waited, 0.0),
                        )
                    )
                return
            if verdict is not None and step is Step.STOP:
                raise stopped(verdict)
            if verdict is not None and step is Step.PAUSE:
                paused, paused_at = paused_event(verdict, request.turn), self.clock.now()
                await self.publish(paused)
                await self.flush()  # stored before the run waits on its approvers
            await self._sleep_unless_cancelled(self.retry_seconds)

    async def _ask(self, request: SpendReserve) -> SpendVerdict | None:
        """The service's verdict, or None (logged at most once a minute) when none came."""
        body = request.model_dump_json().encode()
        try:
            msg = await self.nc.request(self.subject, body, timeout=self.reply_timeout)
        except nats.errors.NoRespondersError:
            self._silence("no spend service answers")
            return None
        except nats.errors.TimeoutError:
            self._silence(f"no answer within {self.reply_timeout:g}s")
            return None
        except nats.errors.Error as exc:
            self._silence(f"the request failed ({type(exc).__name__})")
            return None
        headers = msg.headers or {}
        if _SERVICE_ERROR in headers or _SERVICE_ERROR_CODE in headers:
            code = headers.get(_SERVICE_ERROR_CODE, "?")
            self._silence(f"it answered an error ({code}: {headers.get(_SERVICE_ERROR)})")
            return None
        try:
            verdict = SpendVerdict.model_validate_json(msg.data)
        except ValidationError:
            self._silence("an unreadable reply")
            return None
        self._silent_since = self._logged_silence = None
        return verdict

    def _silence(self, why: str) -> None:
        now = self.clock.now()
        if self._silent_since is None:
            self._silent_since = now
        last = self._logged_silence
        if last is None or (now - last).total_seconds() >= SILENCE_LOG_INTERVAL:
            self._logged_silence = now
            waited = (now - self._silent_since).total_seconds()
            log.warning(
                "run %s: model call not reserved: %s (for %.0fs); no model call until one is",
                self.control.run_id,
                why,
                waited,
            )

    async def _sleep_unless_cancelled(self, seconds: float) -> None:
        """Sleep `seconds`, or less when a cancel request comes (then raise its `RunStopped`)."""
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        cancelled = asyncio.ensure_future(self.control.cancelled.wait())
        try:
            await asyncio.wait({sleeper, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (sleeper, cancelled):
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter
        self.control.stop_if_cancelled()
