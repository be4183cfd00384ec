"""``nexus.scheduler.v1.agent_schedules.<run_id>``: a live run's agent creates, lists and
deletes its own schedules (the `schedule_create|list|delete` tools, docs/schedules.md).

The leader answers (it holds the live runs' configs and the schedules): the agent, its task
and which of the three tools it was granted are read from the run the subject names, never
from the body, and a run's credential may ask for its own run only. Requests are answered one
at a time, so two creates racing cannot pass the agent's cap together; a new leader loads
every schedule before it answers. What is created is an ordinary `ScheduleDefined` of the
agent (`created_by_run`, `created_by_agent` set): it fires, is admitted and gated like any of
the agent's runs, and an operator pauses or removes it with `nexus schedule`.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

from nats.micro.service import Service
from nexus_events.contract import subjects
from nexus_events.events import (
    AgentScheduleOp,
    AgentScheduleRequest,
    AgentSchedulesReply,
    AgentScheduleView,
    RunConfig,
    ScheduleDefined,
    ScheduleRemoved,
)
from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.transport import micro
from nexus_events.transport.bus import Bus
from nexus_events.transport.micro import QueryError

from nexus_scheduler.agent_schedule_rules import (
    ScheduleRefusedError,
    agent_schedule_id,
    check_cap,
    check_trigger,
)
from nexus_scheduler.schedules_service import ScheduleService

SERVICE = "nexus-scheduler-agent-schedules"
# A live run's config, by run id (None: not live, or not this scheduler's).
LiveConfig = Callable[[str], RunConfig | None]


class AgentSchedules:
    """The endpoint of one leadership term: `start` when leading, `stop` on stepping down."""

    def __init__(
        self,
        bus: Bus,
        live_config: LiveConfig,
        schedules: ScheduleService,
        *,
        limit: int,
        clock: Clock | None = None,
    ) -> None:
        self.bus = bus
        self.live_config = live_config
        self.schedules = schedules
        self.limit = limit
        self.clock: Clock = clock or SystemClock()
        self._one_at_a_time = asyncio.Lock()
        self._service: Service | None = None

    async def start(self) -> None:
        handler = micro.per_run_handler(AgentScheduleRequest, self.answer, service="scheduler")
        self._service = await micro.start_service(
            self.bus.nc,
            SERVICE,
            "A run's agent's own schedules (the schedule_* tools).",
            [("agent_schedules", subjects.AGENT_SCHEDULES, handler)],
        )

    async def stop(self) -> None:
        service, self._service = self._service, None
        await micro.stop_service(service)

    async def answer(self, run_id: str, request: AgentScheduleRequest) -> AgentSchedulesReply:
        config = self.live_config(run_id)
        if config is None:
            raise QueryError(404, f"run {run_id} is not live: only a live run manages schedules")
        tool = f"schedule_{request.op.value}"
        if tool not in {t.name for t in config.tools}:
            raise QueryError(403, f"agent {config.agent_id} is not granted {tool}")
        async with self._one_at_a_time:
            created = deleted = None
            try:
                if request.op is AgentScheduleOp.CREATE:
                    created = await self._create(run_id, config, request)
                elif request.op is AgentScheduleOp.DELETE:
                    deleted = await self._delete(run_id, config.agent_id, request.schedule_id)
            except ScheduleRefusedError as exc:
                raise QueryError(400, str(exc)) from None
            return AgentSchedulesReply(
                schedules=self._views(config.agent_id),
                created=created,
                deleted=deleted,
                limit=self.limit,
            )

    async def _create(self, run_id: str, config: RunConfig, request: AgentScheduleRequest) -> str:
        if not request.input.strip():
            raise ScheduleRefusedError(
                "input is empty: say what each run of the schedule should do"
            )
        check_trigger(request)
        agent = config.agent_id
        schedule_id = agent_schedule_id(agent, run_id, request.key or _content_key(request))
        if schedule_id in self.schedules.schedules:
            return schedule_id  # the same call again (a retry, a resumed attempt)
        check_cap(agent, len(self._own(agent)), self.limit)
        defined = ScheduleDefined(
            agent_id=agent,
            task_id=config.task_id,
            input=request.input,
            cron=request.cron.strip() if request.cron else None,
            interval_seconds=request.interval_seconds,
            created_by_run=run_id,
            created_by_agent=agent,
        )
        await self.bus.publish(
            subjects.schedule_event(schedule_id, "defined"),
            defined,
            msg_id=f"agent-schedule:{schedule_id}:defined",
        )
        self.schedules.define(schedule_id, defined, self.clock.now())
        return schedule_id

    async def _delete(self, run_id: str, agent: str, schedule_id: str | None) -> str:
        if schedule_id is None or schedule_id not in self._own(agent):
            raise ScheduleRefusedError(f"agent {agent} has no schedule {schedule_id!r} to delete")
        await self.bus.publish(
            subjects.schedule_event(schedule_id, "removed"),
            ScheduleRemoved(removed_by=f"run:{run_id}"),
        )
        self.schedules.remove(schedule_id)
        return schedule_id

    def _own(self, agent: str) -> list[str]:
        return sorted(
            sid
            for sid, state in self.schedules.schedules.items()
            if state.definition.created_by_agent == agent
        )

    def _views(self, agent: str) -> list[AgentScheduleView]:
        out = []
        for sid in self._own(agent):
            d = self.schedules.schedules[sid].definition
            out.append(
                AgentScheduleView(
                    schedule_id=sid,
                    cron=d.cron,
                    interval_seconds=d.interval_seconds,
                    input=d.input,
                    enabled=d.enabled,
                    created_by_run=d.created_by_run,
                )
            )
        return out


def _content_key(request: AgentScheduleRequest) -> str:
    """Without a call id: the same trigger and input from the same run is the same schedule."""
    text = f"{request.cron}\x00{request.interval_seconds}\x00{request.input}"
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


__all__ = ["SERVICE", "AgentSchedules"]
