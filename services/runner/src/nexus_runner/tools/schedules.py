"""The `schedule_create|list|delete` tools: a run's agent manages its own schedules through
the scheduler (``nexus.scheduler.v1.agent_schedules.<run_id>``, docs/schedules.md).

The scheduler decides: the agent is the run's (read from the run, not sent), and its rules
(a valid trigger, at least 60 s apart, the agent's cap) are its own. Nothing here raises past
the tool: a refusal or an absent scheduler is a `ToolError` the model reads, and the run goes
on.
"""

from __future__ import annotations

import nats.errors
from nats.aio.client import Client
from nexus_events.contract import subjects
from nexus_events.events import AgentScheduleOp, AgentScheduleRequest, AgentSchedulesReply
from nexus_events.transport.micro import read_reply
from pydantic import ValidationError

from nexus_runner.errors import ToolError
from nexus_runner.tools.args import ScheduleCreateArgs, ScheduleDeleteArgs

UNAVAILABLE = "the scheduler is unavailable"


class RunSchedules:
    """One run's access to its agent's schedules, with a bounded wait."""

    def __init__(self, nc: Client, run_id: str, *, timeout: float) -> None:
        self.nc = nc
        self.run_id = run_id
        self.timeout = timeout

    async def create(self, args: ScheduleCreateArgs, call_id: str) -> str:
        request = AgentScheduleRequest(
            op=AgentScheduleOp.CREATE,
            cron=args.cron,
            interval_seconds=args.interval_seconds,
            input=args.input,
            key=call_id or None,  # a retried call makes the same schedule
        )
        reply = await self._ask(request, "not created")
        return f"created schedule {reply.created}\n{_listing(reply)}"

    async def list(self) -> str:
        return _listing(await self._ask(AgentScheduleRequest(op=AgentScheduleOp.LIST), "no list"))

    async def delete(self, args: ScheduleDeleteArgs) -> str:
        request = AgentScheduleRequest(op=AgentScheduleOp.DELETE, schedule_id=args.schedule_id)
        reply = await self._ask(request, "not deleted")
        return f"deleted schedule {reply.deleted}\n{_listing(reply)}"

    async def _ask(self, request: AgentScheduleRequest, failed: str) -> AgentSchedulesReply:
        body = request.model_dump_json(exclude_none=True).encode()
        try:
            msg = await self.nc.request(
                subjects.agent_schedules(self.run_id), body, timeout=self.timeout
            )
        except nats.errors.NoRespondersError:
            raise ToolError(f"{failed}: {UNAVAILABLE} (no scheduler answers); try later") from None
        except nats.errors.TimeoutError:
            raise ToolError(
                f"{failed}: {UNAVAILABLE} (no answer within {self.timeout:g}s); list your"
                " schedules before trying again"
            ) from None
        except nats.errors.Error as exc:
            raise ToolError(f"{failed}: {UNAVAILABLE} ({type(exc).__name__})") from None
        answer = read_reply(msg)
        if answer.error_code is not None:
            code = int(answer.error_code) if answer.error_code.isdigit() else 500
            if 400 <= code < 500:  # the request's fault, in the scheduler's words
                raise ToolError(f"{failed}: {answer.message}")
            raise ToolError(f"{failed}: {UNAVAILABLE} ({answer.message})")
        try:
            return AgentSchedulesReply.model_validate(answer.data)
        except ValidationError:
            raise ToolError(f"{failed}: {UNAVAILABLE} (an unreadable reply)") from None


def _listing(reply: AgentSchedulesReply) -> str:
    lines = [f"this agent's schedules ({len(reply.schedules)} of at most {reply.limit}):"]
    for s in reply.schedules:
        trigger = f"cron {s.cron}" if s.cron else f"every {s.interval_seconds}s"
        paused = "" if s.enabled else " (paused by an operator)"
        lines.append(f"- {s.schedule_id}: {trigger}{paused}: {s.input[:200]}")
    if not reply.schedules:
        lines.append("- none")
    return "\n".join(lines)


__all__ = ["RunSchedules"]
