"""The run assembly handler: `requested` in -> catalog + memory -> `prepared` or `failed` out.

Choices (documented in the service README section of the report):

- A request on the ``new`` run-id token is re-published as a `requested` under a generated run
  id (derived from the original's stream position; `request_run`, message id
  ``core:<run id>:requested``) and then assembled like any other; the original stays in the
  stream as the audit record, and the projections ignore the ``new`` token. Every run then
  has a `requested` of its own.
- Outcomes are published with deterministic ids (``core:prepared:<run id>``,
  ``core:failed:<run id>``): a redelivered request never prepares twice.
- A second request for an existing run id with a different body must not touch the existing
  run: it is failed with ``run_id_conflict`` under a derived run id
  (``<run id>-conflict-<hash>``, detail.conflicts_with names the existing run). The same body
  again is a duplicate and is dropped.
- Unknown agent or skill while the catalog projection is behind the stream: retried shortly
  (the definition may be on its way), then failed.
- The lab (docs/lab.md): a request may pin the agent's revision, skills' revisions and the
  model; a lab request's source run is checked (`lab_sources`) before assembly. An agent
  whose latest revision names a canary gets the arm its run id draws, unless the request
  pins a revision or is a lab run (those ask for one definition on purpose).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import RUNS
from nexus_events.events import (
    MemoryContext,
    Reason,
    RunConfig,
    RunFailed,
    RunPrepared,
    RunRequested,
)
from nexus_events.events.lab_specs import CanaryArm, CanarySpec
from nexus_events.transport.bus import Bus, ConsumerSpec, Delivery
from nexus_events.transport.run_requests import request_run

from nexus_core.assembly import (
    AssemblyFailure,
    assemble,
    conflict_run_id,
    generated_run_id,
    request_fingerprint,
)
from nexus_core.catalog_store import CatalogStore, StoredAgent, StoredSkill
from nexus_core.lab_assembly import LabSource, WantedSkill, canary_arm, wanted_skills
from nexus_core.lab_sources import LabSourceReader, SourceNotProjected, unusable
from nexus_core.memory import MemoryClient
from nexus_core.requests_store import RunRequestStore
from nexus_core.tracing import AGENT_ID, OUTCOME, TASK_ID, event_span

log = logging.getLogger(__name__)

ASSEMBLY_DURABLE = "core_assembly"
# A request naming an agent or skill the catalog does not hold yet waits this long for the
# catalog projection to apply what NEXUS_CATALOG held when it looked (an agent applied just
# before the run was asked for), then is redelivered after the retry delay, up to
# `max_lag_retries` deliveries. Under load the projection can lag well past a fixed 0.6 s:
# the compose smoke test, with both cores busy, failed one run in four that way.
CATALOG_LAG_WAIT_SECONDS = 2.0
CATALOG_LAG_RETRY_SECONDS = 0.2
# A lab request whose source run is in NEXUS_RUNS but not yet in agent_runs (a run that just
# started, a projection catching up) is redelivered after this, up to `max_lag_retries`.
SOURCE_LAG_RETRY_SECONDS = 1.0


def assembly_consumer_spec(
    durable: str = ASSEMBLY_DURABLE, fetch_timeout: float = 1.0
) -> ConsumerSpec:
    return ConsumerSpec(
        stream=RUNS,
        durable=durable,
        filter_subjects=(subjects.run_events_filter(None, RunEvent.REQUESTED),),
        batch=100,
        fetch_timeout=fetch_timeout,
    )


def _request_attributes(d: Delivery) -> dict[str, Any]:
    event = d.event
    if isinstance(event, RunRequested):
        return {AGENT_ID: event.agent_id, TASK_ID: event.task_id or ""}
    return {}


def prepared_id(run_id: str) -> str:
    return f"core:prepared:{run_id}"


def failed_id(run_id: str) -> str:
    return f"core:failed:{run_id}"


@dataclass(frozen=True)
class AssemblyInputs:
    """What the catalog holds for one request (see `AssemblyHandler._load`)."""

    agent: StoredAgent | None
    latest_revision: int | None
    skills: dict[str, StoredSkill | None]
    canary: CanaryArm | None

    @property
    def incomplete(self) -> bool:
        return self.agent is None or any(s is None for s in self.skills.values())


@dataclass
class AssemblyHandler:
    """Batch handler for `Bus.consumer`: handles each run id's requests in order, different
    run ids concurrently."""

    bus: Bus
    catalog: CatalogStore
    requests: RunRequestStore
    memory: MemoryClient
    # Waits up to the given seconds until the catalog has applied everything NEXUS_CATALOG
    # holds now; whether it has.
    catalog_caught_up: Callable[[float], Awaitable[bool]]
    max_lag_retries: int = 3
    concurrency: int = 8
    # Reads a lab run's source (None: lab requests fail, as in tests of assembly alone).
    lab_sources: LabSourceReader | None = None
    # The team a task names, from the board (None: no task names one, as in tests of
    # assembly alone). A task the board has not projected yet counts as naming none.
    task_teams: Callable[[str], Awaitable[str | None]] | None = None

    async def __call__(self, deliveries: list[Delivery]) -> None:
        groups: dict[str, list[Delivery]] = {}
        for d in deliveries:
            groups.setdefault(d.decoded.address.run_id or "", []).append(d)
        limit = asyncio.Semaphore(self.concurrency)

        async def run(group: list[Delivery]) -> None:
            async with limit:
                for d in group:
                    with event_span("core assemble", d.decoded, _request_attributes(d)) as span:
                        outcome = await self.handle(d)
                        if span is not None:
                            span.set_attribute(OUTCOME, outcome)

        # A failure cancels the other groups (no task outlives the batch); the consumer then
        # hands each delivery over alone, so only the failing request is retried.
        async with asyncio.TaskGroup() as tg:
            for g in groups.values():
                tg.create_task(run(g))

    async def handle(self, d: Delivery) -> str:  # noqa: PLR0911 - one return per outcome
        """Handle one request; return its outcome (span attribute `nexus.outcome`)."""
        event = d.event
        if not isinstance(event, RunRequested):  # the filter only delivers `requested`
            return "ignored"
        env = d.envelope
        run_id = d.decoded.address.run_id or ""
        if run_id == subjects.NEW_RUN_TOKEN:
            await self._republish_new(d, event)
            return "republished"
        claim = await self.requests.claim(
            run_id, request_fingerprint(event), env.event_id, env.stream_seq
        )
        if claim.kind == "conflict":
            await self._conflict(d, run_id)
            return "conflict"
        if claim.kind == "duplicate" and claim.outcome != "pending":
            return "duplicate"  # already prepared or failed; its outcome is in the stream
        inputs = await self._load(run_id, event)
        if inputs.incomplete and d.num_delivered <= self.max_lag_retries:
            # Read your writes: what the catalog had not applied yet may be what is missing.
            if not await self.catalog_caught_up(CATALOG_LAG_WAIT_SECONDS):
                d.retry(CATALOG_LAG_RETRY_SECONDS)
                return "retry"
            inputs = await self._load(run_id, event)
        source = await self._lab_source(event, inputs)
        if isinstance(source, SourceNotProjected) and d.num_delivered <= self.max_lag_retries:
            d.retry(SOURCE_LAG_RETRY_SECONDS)  # the source's row is on its way to agent_runs
            return "retry"
        result = (
            source
            if isinstance(source, AssemblyFailure)
            else await self._assemble(run_id, event, inputs, source)
        )
        correlation = env.correlation_id or env.event_id
        if isinstance(result, AssemblyFailure):
            await self.bus.publish(
                subjects.run_event(run_id, RunEvent.FAILED),
                RunFailed(reason=result.reason, message=result.message, detail=result.detail),
                msg_id=failed_id(run_id),
                correlation_id=correlation,
                causation_id=env.event_id,
            )
            await self.requests.finish(run_id, "failed", result.reason)
            log.info("run %s failed: %s", run_id, result.message)
            return "failed"
        await self.bus.publish(
            subjects.run_event(run_id, RunEvent.PREPARED),
            RunPrepared(config=result),
            msg_id=prepared_id(run_id),
            correlation_id=correlation,
            causation_id=env.event_id,
        )
        await self.requests.finish(run_id, "prepared")
        return "prepared"

    async def _lab_source(
        self, event: RunRequested, inputs: AssemblyInputs
    ) -> LabSource | AssemblyFailure | None:
        """A lab request's source run, or why it cannot be used; None for other requests."""
        if event.lab is None or inputs.incomplete:
            return None
        if self.lab_sources is None:
            return unusable(event.lab, "this core reads no lab sources")
        return await self.lab_sources.read(event.lab, event.agent_id)

    async def _assemble(
        self, run_id: str, event: RunRequested, inputs: AssemblyInputs, source: LabSource | None
    ) -> RunConfig | AssemblyFailure:
        # Memory is asked only when the run can be prepared at all.
        memory = (
            MemoryContext(status="disabled")
            if inputs.incomplete
            else await self.memory.search(event)
        )
        task_id = event.task_id or (source.task_id if source is not None else None)
        task_team = None
        if event.team is None and task_id is not None and self.task_teams is not None:
            task_team = await self.task_teams(task_id)
        return assemble(
            run_id,
            event,
            inputs.agent,
            inputs.skills,
            memory,
            latest_revision=inputs.latest_revision,
            canary=inputs.canary,
            source=source,
            task_team=task_team,
        )

    async def _load(self, run_id: str, event: RunRequested) -> AssemblyInputs:
        """The agent definition to assemble (the latest, the revision asked for, or a
        canary's candidate) and each skill it uses (None where the catalog has none)."""
        latest = await self.catalog.get_agent(event.agent_id)
        agent, canary = latest, None
        if event.agent_revision is not None:
            agent = await self.catalog.get_agent(event.agent_id, event.agent_revision)
        elif latest is not None and latest.definition.canary is not None and event.lab is None:
            agent, canary = await self._canary_arm(run_id, latest, latest.definition.canary)
        skills: dict[str, StoredSkill | None] = {}
        if agent is not None:
            for wanted in wanted_skills(agent.definition, event.skill_revisions):
                skills[wanted.key] = await self._skill(wanted)
        return AssemblyInputs(agent, None if latest is None else latest.revision, skills, canary)

    async def _canary_arm(
        self, run_id: str, latest: StoredAgent, spec: CanarySpec
    ) -> tuple[StoredAgent, CanaryArm]:
        """The arm a run of an agent with a canary gets, and the definition it is assembled
        with: the candidate's (its own canary dropped) or the current one."""
        arm = canary_arm(run_id, latest.revision, spec)
        if arm.arm == "current":
            return latest, arm
        candidate = await self.catalog.get_agent(latest.definition.id, spec.revision)
        if candidate is None:  # refused at apply: only a hand-published event gets here
            log.warning(
                "canary of %s names missing revision %d", latest.definition.id, spec.revision
            )
            return latest, arm.model_copy(update={"arm": "current"})
        definition = candidate.definition.model_copy(update={"canary": None})
        return StoredAgent(definition, candidate.revision, candidate.updated_at), arm

    async def _skill(self, wanted: WantedSkill) -> StoredSkill | None:
        if wanted.revision is None:
            return await self.catalog.get_skill(wanted.name, wanted.version)
        for revision, deleted, skill in await self.catalog.skill_history(wanted.name):
            if revision == wanted.revision:
                return None if deleted or skill is None else StoredSkill(skill, revision, None)
        return None

    async def _republish_new(self, d: Delivery, event: RunRequested) -> None:
        env = d.envelope
        run_id = generated_run_id(env.stream, env.stream_seq, env.event_id)
        await request_run(
            self.bus,
            run_id,
            event,
            source="core",
            correlation_id=env.correlation_id or env.event_id,
            causation_id=env.event_id,
        )
        log.info("request %s got run id %s", env.event_id, run_id)

    async def _conflict(self, d: Delivery, run_id: str) -> None:
        env = d.envelope
        target = conflict_run_id(run_id, env.event_id)
        await self.bus.publish(
            subjects.run_event(target, RunEvent.FAILED),
            RunFailed(
                reason=Reason.RUN_ID_CONFLICT,
                message=f"run {run_id!r} already exists with a different request",
                detail={"conflicts_with": run_id, "request_event_id": env.event_id},
            ),
            msg_id=failed_id(target),
            correlation_id=env.correlation_id or env.event_id,
            causation_id=env.event_id,
        )
        log.warning("request %s conflicts with run %s; failed as %s", env.event_id, run_id, target)
