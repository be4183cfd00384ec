"""How a budget ask ends: a person's decision on its pseudo-run's inbox (`AskDecisions`) or
its expiry (`AskExpiry`), recorded as the ask's `approval_decided` (NEXUS_RUNS) and its
outcome, `extended` or `ask_closed` (NEXUS_BUDGETS).

Whoever concludes an ask (two replicas, a redelivery, an expiry racing a late answer) publishes
under the same message ids, and the outcome always follows the `approval_decided` the stream
kept, so an ask ends once and one way.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Literal

import asyncpg
import nats.errors
import nats.js.errors
from nexus_events.contract import subjects
from nexus_events.contract.codec import decode
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import BUDGETS, INBOX, RUNS
from nexus_events.errors import NexusError
from nexus_events.events import (
    ApprovalDecided,
    ApprovalDecision,
    BudgetAskClosed,
    BudgetAskOpened,
    BudgetExtended,
)
from nexus_events.events.base import Event
from nexus_events.events.budgets import BudgetEvent
from nexus_events.runtime.clock import Clock
from nexus_events.transport.approvals import claim_approval
from nexus_events.transport.bus import Bus, Consumer, ConsumerSpec, Delivery
from nexus_events.transport.projection import quote_ident

from nexus_spend.decide import AskState
from nexus_spend.schema import SCHEMA

log = logging.getLogger(__name__)

ASK_PREFIX = "budget-ask-"
# The surface an expiry is recorded under (in the approvals claim and `approval_decided`).
EXPIRY_SURFACE = "spend"

Outcome = Literal["approved", "denied", "expired"]


def decided_msg_id(ask_id: str) -> str:
    return f"spend:{ask_id}:decided"


def outcome_msg_id(ask_id: str) -> str:
    """One id for `extended` and `ask_closed` (same stream): only the first is stored."""
    return f"spend:{ask_id}:outcome"


@dataclass(frozen=True, slots=True)
class AskRecord:
    """What concluding an ask needs to know of it."""

    ask_id: str
    budget_id: str
    revision: int
    instance: str
    bucket: str
    approval_id: str
    extend_cost_usd: float = 0.0
    extend_tokens: int = 0
    extend_runs: int = 0

    @classmethod
    def of(cls, opened: BudgetAskOpened) -> AskRecord:
        return cls(
            ask_id=opened.ask_id,
            budget_id=opened.budget_id,
            revision=opened.revision,
            instance=opened.instance,
            bucket=opened.bucket,
            approval_id=opened.approval_id,
            extend_cost_usd=opened.extend_cost_usd,
            extend_tokens=opened.extend_tokens,
            extend_runs=opened.extend_runs,
        )


async def _last(bus: Bus, stream: str, subject: str) -> Event | None:
    """The last event stored on `subject` (a direct get), None if none or undecodable."""
    try:
        raw = await bus.js.get_last_msg(stream, subject)
    except nats.js.errors.NotFoundError:
        return None
    with contextlib.suppress(NexusError):
        return decode(raw.subject or "", raw.data or b"", dict(raw.headers or {})).event
    return None


async def ask_opened(bus: Bus, ask_id: str) -> BudgetAskOpened | None:
    """The ask's own record on NEXUS_BUDGETS (only the spend service writes there)."""
    event = await _last(bus, BUDGETS, subjects.budget_event(ask_id, BudgetEvent.ASK_OPENED))
    return event if isinstance(event, BudgetAskOpened) else None


async def outcome_recorded(bus: Bus, ask_id: str) -> bool:
    """Whether NEXUS_BUDGETS already holds the ask's `extended` or `ask_closed`."""
    for event in (BudgetEvent.EXTENDED, BudgetEvent.ASK_CLOSED):
        if await _last(bus, BUDGETS, subjects.budget_event(ask_id, event)) is not None:
            return True
    return False


async def conclude(bus: Bus, ask: AskRecord, decided: ApprovalDecided) -> ApprovalDecided:
    """Record `decided` on the ask's pseudo-run, unless a decision is already stored (then
    that one stands), and the outcome that follows the stored one. Returns the stored one."""
    subject = subjects.run_event(ask.ask_id, RunEvent.APPROVAL_DECIDED)
    stored = await _last(bus, RUNS, subject)
    if not isinstance(stored, ApprovalDecided):
        ack = await bus.publish(subject, decided, msg_id=decided_msg_id(ask.ask_id))
        stored = decided
        if ack.duplicate:
            # Another replica (or an earlier delivery) got there first: follow its word.
            earlier = await _last(bus, RUNS, subject)
            stored = earlier if isinstance(earlier, ApprovalDecided) else decided
    if await outcome_recorded(bus, ask.ask_id):
        return stored
    scope = {
        "budget_id": ask.budget_id,
        "revision": ask.revision,
        "instance": ask.instance,
        "bucket": ask.bucket,
        "ask_id": ask.ask_id,
        "decided_by": stored.decided_by,
    }
    if stored.decision == "approved":
        extended = BudgetExtended(
            **scope,
            cost_usd=ask.extend_cost_usd,
            tokens=ask.extend_tokens,
            runs=ask.extend_runs,
            surface=stored.surface,
        )
        event: Event = extended
        name = BudgetEvent.EXTENDED
    else:
        event = BudgetAskClosed(**scope, decision=stored.decision)
        name = BudgetEvent.ASK_CLOSED
    await bus.publish(
        subjects.budget_event(ask.ask_id, name), event, msg_id=outcome_msg_id(ask.ask_id)
    )
    log.info("budget ask %s %s by %s", ask.ask_id, stored.decision, stored.decided_by)
    return stored


class AskDecisions:
    """A durable consumer of NEXUS_INBOX that concludes budget asks from people's answers
    (`approval_decision` on ``agent.inbox.v1.budget-ask-…``); everything else is acked."""

    def __init__(
        self,
        pool: asyncpg.Pool[Any],
        bus: Bus,
        clock: Clock,
        *,
        durable: str = "spend_asks",
        fetch_timeout: float = 1.0,
        schema: str = SCHEMA,
    ) -> None:
        self.pool = pool
        self.bus = bus
        self.clock = clock
        self.q = quote_ident(schema)
        self.spec = ConsumerSpec(
            stream=INBOX,
            durable=durable,
            filter_subjects=(subjects.family_filter(subjects.Family.INBOX),),
            fetch_timeout=fetch_timeout,
        )
        self._consumer: Consumer | None = None

    async def start(self) -> None:
        self._consumer = self.bus.consumer(self.spec, self.on_batch)
        await self._consumer.start()

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def on_batch(self, batch: list[Delivery]) -> None:
        for d in batch:
            ask_id = d.address.ids.get("run_id")
            if (
                ask_id is None
                or not ask_id.startswith(ASK_PREFIX)
                or not isinstance(d.event, ApprovalDecision)
            ):
                continue
            await self.decide(ask_id, d.event)

    async def decide(self, ask_id: str, answer: ApprovalDecision) -> ApprovalDecided | None:
        """Conclude the ask from `answer`; None (logged) when there is nothing to conclude.
        An answer after the ask's `expires_at` concludes it as expired (the expiry could not
        claim it: the answering surface did)."""
        state = await self.pool.fetchval(
            f"SELECT state FROM {self.q}.asks WHERE ask_id = $1", ask_id
        )
        if state is not None and state != AskState.OPEN:
            log.info("a decision on budget ask %s, already %s: ignored", ask_id, state)
            return None
        # Not folded yet, or open: the ask's own record on the stream says the rest.
        opened = await ask_opened(self.bus, ask_id)
        if opened is None:
            log.warning("a decision on budget ask %s, which was never opened: ignored", ask_id)
            return None
        if answer.approval_id != opened.approval_id:
            log.warning(
                "a decision on approval %s of budget ask %s, which asks %s: ignored",
                answer.approval_id,
                ask_id,
                opened.approval_id,
            )
            return None
        if await outcome_recorded(self.bus, ask_id):
            log.info("a decision on budget ask %s, already concluded: ignored", ask_id)
            return None
        outcome: Outcome = "approved" if answer.decision == "approve" else "denied"
        decided = ApprovalDecided(
            approval_id=opened.approval_id,
            decision=outcome,
            decided_by=answer.decided_by,
            comment=answer.comment,
            surface=answer.surface,
        )
        if self.clock.now() > opened.expires_at:
            log.info("budget ask %s answered after it expired: closed as expired", ask_id)
            decided = ApprovalDecided(
                approval_id=opened.approval_id, decision="expired", surface=EXPIRY_SURFACE
            )
        return await conclude(self.bus, AskRecord.of(opened), decided)


class AskExpiry:
    """`step()`: close every open ask past its `expires_at` as expired, once the approvals
    claim is won (a person's answer that claimed first arrives on the inbox instead)."""

    def __init__(
        self, pool: asyncpg.Pool[Any], bus: Bus, clock: Clock, *, schema: str = SCHEMA
    ) -> None:
        self.pool = pool
        self.bus = bus
        self.clock = clock
        self.q = quote_ident(schema)

    async def step(self) -> list[str]:
        """The asks closed as expired by this step."""
        rows = await self.pool.fetch(
            f"""SELECT ask_id, budget_id, revision, instance, bucket, approval_id
                FROM {self.q}.asks WHERE state = $1 AND expires_at <= $2 ORDER BY expires_at""",
            AskState.OPEN,
            self.clock.now(),
        )
        expired = []
        for r in rows:
            ask = AskRecord(
                r["ask_id"],
                r["budget_id"],
                r["revision"],
                r["instance"],
                r["bucket"],
                r["approval_id"],
            )
            try:
                if await self._expire(ask):
                    expired.append(ask.ask_id)
            except (nats.errors.Error, NexusError) as exc:
                log.warning("closing expired budget ask %s failed (next step): %s", ask.ask_id, exc)
        return expired

    async def _expire(self, ask: AskRecord) -> bool:
        claim = await claim_approval(
            self.bus.js,
            ask.ask_id,
            ask.approval_id,
            AskState.EXPIRED,
            decided_by=None,
            surface=EXPIRY_SURFACE,
            token=f"spend-expiry:{ask.ask_id}",
        )
        if not claim.won:
            log.info("budget ask %s expired but was %s: left to it", ask.ask_id, claim.told())
            return False
        decided = ApprovalDecided(
            approval_id=ask.approval_id, decision="expired", surface=EXPIRY_SURFACE
        )
        stored = await conclude(self.bus, ask, decided)
        return stored.decision == "expired"


__all__ = [
    "ASK_PREFIX",
    "EXPIRY_SURFACE",
    "AskDecisions",
    "AskExpiry",
    "AskRecord",
    "ask_opened",
    "conclude",
    "decided_msg_id",
    "outcome_msg_id",
    "outcome_recorded",
]
