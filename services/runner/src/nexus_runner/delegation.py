"""The `delegate` tool's side on the bus: a `RouteRequest` on ``agent.route.v1.<agent>``
(the channel gateway turns it into a child run and guards depth and cycles), then, when
waiting, the child's result read from this run's inbox by correlation id."""

from __future__ import annotations

import asyncio
import uuid

from nexus_events.contract import subjects
from nexus_events.events.inbox import RouteRequest
from nexus_events.transport.bus import Bus

from nexus_runner.control import RunControl
from nexus_runner.errors import ToolError
from nexus_runner.tools.args import DelegateArgs


class Delegation:
    def __init__(
        self,
        bus: Bus,
        control: RunControl,
        *,
        run_id: str,
        agent_id: str,
        task_id: str | None = None,
    ) -> None:
        self.bus = bus
        self.control = control
        self.run_id = run_id
        self.agent_id = agent_id
        self.task_id = task_id

    async def __call__(self, args: DelegateArgs) -> str:
        correlation = f"{self.run_id}-{uuid.uuid4().hex[:10]}"
        waiter = self.control.expect(correlation) if args.wait else None
        try:
            await self.bus.publish(
                subjects.route(args.agent),
                RouteRequest(
                    correlation_id=correlation,
                    input=args.input,
                    task_id=self.task_id,
                    from_run_id=self.run_id,
                    reply_to=self.run_id,
                    from_agent_id=self.agent_id,
                ),
                msg_id=f"route:{correlation}",
                correlation_id=correlation,
            )
            if waiter is None:
                return (
                    f"delegated to {args.agent} (correlation id {correlation}); its result"
                    " will arrive as a message"
                )
            try:
                answer = await asyncio.wait_for(asyncio.shield(waiter), timeout=args.timeout)
            except TimeoutError:
                raise ToolError(
                    f"no result from {args.agent} within {args.timeout:g} s (correlation id"
                    f" {correlation}); it may still arrive as a message"
                ) from None
            return answer.text
        finally:
            self.control.forget(correlation)
