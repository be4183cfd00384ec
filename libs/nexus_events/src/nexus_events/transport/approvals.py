"""The first decision on an approval wins, whichever surface makes it (chat, CLI, Plane).

Each surface claims the approval with a NATS KV ``create()`` of the key ``<run>.<approval>``
before it publishes its `ApprovalDecision` on the run's inbox: ``create`` succeeds for exactly
one claimant (compare-and-set on "no such key"), so two people answering at once produce one
decision, and the loser learns who won. A bare ``nats pub`` bypasses the claim; the runner
still takes only the first decision it reads (stream order), so the run sees one answer.

Before it claims, a surface asks who may decide (`nexus_events.contract.approver_policy`): the run's
own events say it (`approval_record`: the agent's policy in ``prepared``, the requester and
origin thread in ``requested``), and a refused answer is recorded as ``approval_refused``
(`record_refusal`) and claims nothing.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from nexus_events.contract import subjects
from nexus_events.contract.approver_policy import Answer, ApproverPolicy, Teams, Verdict
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import BUDGETS, FLOWS, RUNS, StreamSettings
from nexus_events.contract.subjects import validate_token
from nexus_events.errors import DecodeError
from nexus_events.events import (
    ApprovalDecided,
    ApprovalRefused,
    ApprovalRequested,
    BudgetAskOpened,
    FlowAccepted,
    FlowRequested,
    GateStep,
    RunPrepared,
    RunRequested,
)
from nexus_events.events.budgets import BUDGET_ASK_TOOL as BUDGET_ASK_TOOL_NAME
from nexus_events.events.budgets import BudgetEvent
from nexus_events.transport.bucket_replicas import follow_replicas
from nexus_events.transport.bus import Bus
from nexus_events.transport.consume import decode_msg

# KV bucket of approval claims. Entries outlive any approval (the runner's expiry is minutes
# to hours), and a week keeps the bucket small.
APPROVALS_BUCKET = "nexus_approvals"
CLAIM_TTL_SECONDS = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Claim:
    """Who holds an approval's decision: `won` is True for the caller that made it."""

    won: bool
    decision: str
    decided_by: str | None
    surface: str | None

    def told(self) -> str:
        """The decision as every surface tells it: ``deny by alice via cli``."""
        return decided_as(self.decision, self.decided_by, self.surface)


def decided_as(decision: str, decided_by: str | None, surface: str | None) -> str:
    """``<decision>[ by <who>][ via <surface>]``, the words chat, Plane and the CLI use."""
    by = f" by {decided_by}" if decided_by else ""
    via = f" via {surface}" if surface else ""
    return f"{decision}{by}{via}"


async def approvals_bucket(js: JetStreamContext, replicas: int | None = None) -> KeyValue:
    """The claims bucket, created on first use (idempotent across services) with `replicas`
    JetStream replicas (None: the streams' setting, NEXUS_STREAMS_REPLICAS); an existing one
    is brought to those replicas."""
    if replicas is None:
        replicas = StreamSettings().replicas
    try:
        kv = await js.key_value(APPROVALS_BUCKET)
    except BucketNotFoundError:
        return await js.create_key_value(
            bucket=APPROVALS_BUCKET, history=1, ttl=CLAIM_TTL_SECONDS, replicas=replicas
        )
    await follow_replicas(js, f"KV_{APPROVALS_BUCKET}", replicas)
    return kv


def claim_key(run_id: str, approval_id: str) -> str:
    return f"{validate_token(run_id, 'run id')}.{validate_token(approval_id, 'approval id')}"


async def claim_approval(
    js: JetStreamContext,
    run_id: str,
    approval_id: str,
    decision: str,
    *,
    decided_by: str | None,
    surface: str,
    token: str | None = None,
) -> Claim:
    """Claim the decision of one approval; the returned `Claim` says whether the caller won
    and, if not, the decision that did. Raises nats errors if the server is unreachable.

    `token` names the claimant's attempt (e.g. the chat message's dedupe key): claiming again
    with the same token wins again, so a claimant that crashed between its claim and its
    publish finishes the job on redelivery instead of being told it lost to itself.
    """
    kv = await approvals_bucket(js)
    key = claim_key(run_id, approval_id)
    body = {"decision": decision, "decided_by": decided_by, "surface": surface, "token": token}
    try:
        await kv.create(key, json.dumps(body).encode())
    except KeyWrongLastSequenceError:
        entry = await kv.get(key)
        held = json.loads(entry.value or b"{}")
        return Claim(
            won=token is not None and held.get("token") == token,
            decision=str(held.get("decision", "")),
            decided_by=held.get("decided_by"),
            surface=held.get("surface"),
        )
    return Claim(won=True, decision=decision, decided_by=decided_by, surface=surface)


async def release_approval(js: JetStreamContext, run_id: str, approval_id: str) -> None:
    """Give a won claim back (the decision could not be published), so another surface can
    decide; only the winner calls this, and nothing else writes a held key."""
    kv = await approvals_bucket(js)
    await kv.delete(claim_key(run_id, approval_id))


async def held_claim(js: JetStreamContext, run_id: str, approval_id: str) -> Claim | None:
    """The claim that decided an approval (`won` False: it is nobody's to win now), or None."""
    kv = await approvals_bucket(js)
    try:
        entry = await kv.get(claim_key(run_id, approval_id))
    except KeyNotFoundError:
        return None
    held = json.loads(entry.value or b"{}")
    return Claim(
        won=False,
        decision=str(held.get("decision", "")),
        decided_by=held.get("decided_by"),
        surface=held.get("surface"),
    )


# Longest delegation chain followed to its root (the gateway allows 20 at most).
MAX_DELEGATION_CHAIN = 20
# The run events an approval's record is made of (one bounded replay of one run).
_RECORD_EVENTS = (
    RunEvent.REQUESTED,
    RunEvent.PREPARED,
    RunEvent.APPROVAL_REQUESTED,
    RunEvent.APPROVAL_DECIDED,
)
# The tool of a flow gate's approval (the flows service's): its pseudo-run has no request.
FLOW_GATE_TOOL = "flow_gate"
# A budget ask's (the spend service's, docs/spend.md): its pseudo-run has no request either.
BUDGET_ASK_TOOL = BUDGET_ASK_TOOL_NAME
# A gate's run id, `step_run_id(flow_run_id, step, round)`: step ids hold no '-'.
_GATE_RUN_ID = re.compile(r"^(?P<flow_run_id>.+)-(?P<step>[a-z0-9_]+)-r[0-9]+$")


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One approval as the run's events tell it: asked, decided, and for whom."""

    run_id: str
    approval_id: str
    asked: ApprovalRequested | None = None
    decided: ApprovalDecided | None = None
    requested: RunRequested | None = None
    agent_approvers: tuple[str, ...] | None = None
    agent_id: str | None = None

    def policy(
        self,
        default: Sequence[str],
        approver_chats: Collection[tuple[str, str]] = (),
        teams: Teams | None = None,
    ) -> ApproverPolicy:
        """The approval's policy: the agent's principals, else `default`, with this run's
        requester and origin; `approver_chats` are the gateway's (channel, chat) pairs and
        `teams` the deployment's (NEXUS_TEAMS, for team:<name>)."""
        requested = self.requested
        return ApproverPolicy(
            principals=tuple(default if self.agent_approvers is None else self.agent_approvers),
            run_id=self.run_id,
            requester=requested.requested_by if requested else None,
            origin_surface=str(requested.origin) if requested else None,
            origin=requested.reply_to if requested else None,
            approver_chats=frozenset(approver_chats),
            from_agent=self.agent_approvers is not None,
            teams=dict(teams or {}),
        )


@dataclass(slots=True)
class _Gathered:
    asked: dict[str, ApprovalRequested] = field(default_factory=dict)
    decided: dict[str, ApprovalDecided] = field(default_factory=dict)
    requested: RunRequested | None = None
    prepared: RunPrepared | None = None


async def run_approvals(bus: Bus, run_id: str) -> list[ApprovalRecord]:
    """Every approval a run asked for, in the order asked (one replay of the run's events)."""
    got = _Gathered()
    filters = [subjects.run_events_filter(run_id, e) for e in _RECORD_EVENTS]
    async for msg in bus.replay_raw(RUNS, filter_subjects=filters):
        try:
            event = decode_msg(msg).event
        except DecodeError:
            continue  # the live consumers dead-letter it; it says nothing about approvals
        if isinstance(event, RunRequested) and got.requested is None:
            got.requested = event
        elif isinstance(event, RunPrepared):
            got.prepared = event  # the last attempt's config is the one the run works under
        elif isinstance(event, ApprovalRequested):
            got.asked.setdefault(event.approval_id, event)
        elif isinstance(event, ApprovalDecided):
            got.decided.setdefault(event.approval_id, event)
    requested = await _root_request(bus, got.requested)
    config = got.prepared.config if got.prepared is not None else None
    approvers = config.permissions.approvers if config is not None else None
    if requested is None and any(a.tool == FLOW_GATE_TOOL for a in got.asked.values()):
        requested, approvers = await _gate_request(bus, run_id)
    if requested is None and any(a.tool == BUDGET_ASK_TOOL for a in got.asked.values()):
        approvers = await _budget_ask_approvers(bus, run_id)
    return [
        ApprovalRecord(
            run_id=run_id,
            approval_id=aid,
            asked=asked,
            decided=got.decided.get(aid),
            requested=requested,
            agent_approvers=None if approvers is None else tuple(approvers),
            agent_id=config.agent_id if config is not None else None,
        )
        for aid, asked in got.asked.items()
    ]


async def _root_request(bus: Bus, requested: RunRequested | None) -> RunRequested | None:
    """The request of the run at the root of a delegation chain: a delegated run was asked
    for by the person who asked for its root, from where they asked (its `requester`)."""
    for _ in range(MAX_DELEGATION_CHAIN):
        if requested is None or requested.parent_run_id is None:
            return requested
        parent = subjects.run_event(requested.parent_run_id, RunEvent.REQUESTED)
        found = None
        # Read to the end (no break): the replay removes its consumer when it finishes.
        async for msg in bus.replay_raw(RUNS, filter_subject=parent):
            with contextlib.suppress(DecodeError):
                event = decode_msg(msg).event
                if isinstance(event, RunRequested) and found is None:
                    found = event
        if found is None:
            return requested  # the parent's request is gone (retention): the child's own
        requested = found
    return requested


async def _gate_request(bus: Bus, gate_run_id: str) -> tuple[RunRequested | None, list[str] | None]:
    """A flow gate's request and approvers, from its flow run's events: whoever asked for the
    flow (from where they asked) is the gate's requester, and the gate step's `approvers`
    (empty: the default) its policy. (None, None) if `gate_run_id` is no gate of a flow run
    (a long id hashed by `step_run_id` cannot be traced back: the default policy, no
    requester)."""
    match = _GATE_RUN_ID.fullmatch(gate_run_id)
    if match is None:
        return None, None
    flow_run_id, step = match["flow_run_id"], match["step"]
    flow: FlowRequested | None = None
    accepted: FlowAccepted | None = None
    filters = [subjects.flow_event(flow_run_id, e) for e in (FlowRequested, FlowAccepted)]
    # Read to the end (no break): the replay removes its consumer when it finishes.
    async for msg in bus.replay_raw(FLOWS, filter_subjects=filters):
        with contextlib.suppress(DecodeError):
            event = decode_msg(msg).event
            if isinstance(event, FlowRequested) and flow is None:
                flow = event
            elif isinstance(event, FlowAccepted) and accepted is None:
                accepted = event
    if flow is None or accepted is None:
        return None, None
    gate = next((s for s in accepted.definition.steps if s.id == step), None)
    if not isinstance(gate, GateStep):
        return None, None
    # The flow's request stands for the gate's: `ApprovalRecord.policy` reads who and where.
    requested = RunRequested(
        agent_id=flow.flow,
        task_id=flow.task_id,
        origin=flow.origin,
        requested_by=flow.requested_by,
        reply_to=flow.reply_to,
    )
    return requested, list(gate.approvers) or None


async def _budget_ask_approvers(bus: Bus, ask_run_id: str) -> list[str] | None:
    """A budget ask's approvers, from the spend service's own record of it (NEXUS_BUDGETS,
    which only spend writes): never from the `approval_requested`, which a run named like an
    ask could publish. None (the default policy) if no such ask was opened."""
    opened: BudgetAskOpened | None = None
    subject = subjects.budget_event(ask_run_id, BudgetEvent.ASK_OPENED)
    # Read to the end (no break): the replay removes its consumer when it finishes.
    async for msg in bus.replay_raw(BUDGETS, filter_subject=subject):
        with contextlib.suppress(DecodeError):
            event = decode_msg(msg).event
            if isinstance(event, BudgetAskOpened) and opened is None:
                opened = event
    return None if opened is None else opened.approvers


async def approval_record(bus: Bus, run_id: str, approval_id: str) -> ApprovalRecord:
    """One approval's record; `asked` is None if the run never asked for it."""
    for record in await run_approvals(bus, run_id):
        if record.approval_id == approval_id:
            return record
    return ApprovalRecord(run_id=run_id, approval_id=approval_id)


async def record_refusal(
    bus: Bus, record: ApprovalRecord, decision: str, answer: Answer, verdict: Verdict, *, key: str
) -> None:
    """Publish the audit event of a refused answer; `key` (the answer's dedupe key) makes a
    redelivered answer record it once."""
    where = None if answer.chat is None else f"{answer.chat.channel}:{answer.chat.conversation}"
    await bus.publish(
        subjects.run_event(record.run_id, RunEvent.APPROVAL_REFUSED),
        ApprovalRefused(
            approval_id=record.approval_id,
            decision="approve" if decision == "approve" else "deny",
            answered_by=answer.who,
            surface=answer.surface,
            where=where,
            reason=verdict.reason,
        ),
        msg_id=f"refused:{answer.surface}:{key}",
    )
