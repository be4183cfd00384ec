"""Delegation: a `RouteRequest` on ``agent.route.v1.<agent>`` becomes a child run of that
agent, unless it would close a cycle or go deeper than the limit; the child's ending goes
back to the requester's inbox with the correlation id (see `Notifier`).

The chain of agents is kept here, from the root run down: the runner only says who it is
(`from_run_id`, `from_agent_id`), so a runner cannot shorten its own chain.

Depth counts delegated runs: a root run (one no delegation started) is at 0, its child at 1,
and `max_depth` is the deepest child allowed (3: root -> 1 -> 2 -> 3). It follows the runs,
not the agent names: whether a request names its sender's agent changes only how the chain
reads in a refusal, never the depth.
"""

from __future__ import annotations

import hashlib
import logging

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import INBOX
from nexus_events.contract.subjects import Family
from nexus_events.events import Event, InboxMessage, Origin, RouteRequest, RunRequested
from nexus_events.transport.bus import Bus, ConsumerSpec
from nexus_events.transport.fast import Delivered

from nexus_channel_gateway.metrics import GatewayMetrics
from nexus_channel_gateway.store import Delegation, GatewayStore

log = logging.getLogger(__name__)

SENDER = "channel-gateway"


def delegation_spec(durable: str, fetch_timeout: float, ack_wait: float = 30.0) -> ConsumerSpec:
    return ConsumerSpec(
        stream=INBOX,
        durable=durable,
        filter_subjects=(subjects.family_filter(Family.ROUTE),),
        batch=20,
        fetch_timeout=fetch_timeout,
        ack_wait=ack_wait,
    )


def child_run_id(correlation_id: str) -> str:
    """One child run per correlation id: a redelivered request asks for the same run."""
    digest = hashlib.blake2b(f"route\0{correlation_id}".encode(), digest_size=6).hexdigest()
    return f"run_{digest}"


def refusal(chain: tuple[str, ...], target: str, depth: int, max_depth: int) -> str | None:
    """Why delegating to `target` from the end of `chain` is refused, or None; `depth` is the
    child's (delegated runs from the root run to it, itself included)."""
    if target in chain:
        return "cycle: " + " -> ".join((*chain, target))
    if depth > max_depth:
        return f"depth limit {max_depth} reached: " + " -> ".join((*chain, target))
    return None


class Delegator:
    def __init__(
        self, bus: Bus, store: GatewayStore, metrics: GatewayMetrics, *, max_depth: int
    ) -> None:
        self.bus = bus
        self.store = store
        self.metrics = metrics
        self.max_depth = max_depth

    async def on_request(self, event: Event, delivered: Delivered) -> None:
        """FastStream handler of the delegation durable (`nexus_events.transport.fast`), not
        ordered: route requests are independent of each other (one child run per correlation id,
        recorded with ON CONFLICT DO NOTHING), and a child's own requests can only come after
        its parent's was handled (the child exists only then), so the messages of a fetch are
        handled concurrently."""
        target = delivered.address.ids.get("agent_id")
        if isinstance(event, RouteRequest) and target:
            await self.route(target, event)

    async def _chain(self, request: RouteRequest) -> tuple[tuple[str, ...], int]:
        """The requester's chain of agents and its depth (0: a root run, or no run at all)."""
        if request.from_run_id is not None:
            held = await self.store.delegation(request.from_run_id)
            if held is not None:
                return held.chain, held.depth
        return ((request.from_agent_id,) if request.from_agent_id else ()), 0

    async def route(self, target: str, request: RouteRequest) -> None:
        chain, parent_depth = await self._chain(request)
        depth = parent_depth + 1
        reply_to = request.reply_to or request.from_run_id
        why = refusal(chain, target, depth, self.max_depth)
        if why is not None:
            self.metrics.delegation("refused")
            log.info("delegation %s to %s refused: %s", request.correlation_id, target, why)
            if reply_to is not None:
                await self._tell(
                    reply_to,
                    f"delegation to {target} refused: {why}",
                    request.correlation_id,
                    f"route-refused:{request.correlation_id}",
                )
            return
        child = child_run_id(request.correlation_id)
        await self.store.record_delegation(
            Delegation(
                child,
                request.from_run_id,
                reply_to,
                request.correlation_id,
                (*chain, target),
                depth,
            )
        )
        await self.bus.publish(
            subjects.run_event(child, RunEvent.REQUESTED),
            RunRequested(
                agent_id=target,
                input=request.input,
                task_id=request.task_id,
                origin=Origin.AGENT,
                requested_by=request.from_run_id or "route",
                parent_run_id=request.from_run_id,
                labels={
                    "correlation_id": request.correlation_id,
                    "delegation_depth": str(depth),
                },
            ),
            msg_id=f"route:{request.correlation_id}",
            correlation_id=request.correlation_id,
        )
        self.metrics.delegation("started")

    async def _tell(self, run_id: str, text: str, correlation_id: str, message_id: str) -> None:
        await self.bus.publish(
            subjects.inbox(run_id),
            InboxMessage(
                text=text,
                sender=SENDER,
                sender_kind="agent",
                message_id=message_id,
                correlation_id=correlation_id,
            ),
            msg_id=message_id,
            correlation_id=correlation_id,
        )

    async def ended(self, held: Delegation, text: str) -> None:
        """The child run ended: its outcome goes to the requester's inbox."""
        if held.reply_to is None:
            return
        await self._tell(
            held.reply_to, text, held.correlation_id, f"route-result:{held.child_run_id}"
        )
