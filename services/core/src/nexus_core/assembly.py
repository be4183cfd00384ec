"""Run assembly (docs/design.md §5.2, steps 1-4) as a pure decision.

`assemble` turns a run request, the agent definition, its skills and the memory context into
the `RunConfig` a runner is given, or into an `AssemblyFailure` with the reason code of the
`failed` event. It does no I/O: the handler loads the inputs and publishes the outcome.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nexus_events.events import MemoryContext, Reason, RunConfig, RunRequested, SkillDoc
from nexus_events.events.egress import unique_grants
from nexus_events.events.lab_specs import CanaryArm

from nexus_core.catalog_store import StoredAgent, StoredSkill
from nexus_core.lab_assembly import LabSource, lab_permissions, lab_repo, wanted_skills


@dataclass(frozen=True)
class AssemblyFailure:
    """Why a run cannot be prepared: the `failed` event's reason, message and detail."""

    reason: str
    message: str
    detail: dict[str, Any] = field(default_factory=dict)


def assemble(
    run_id: str,
    request: RunRequested,
    agent: StoredAgent | None,
    skills: Mapping[str, StoredSkill | None],
    memory: MemoryContext,
    *,
    latest_revision: int | None = None,
    canary: CanaryArm | None = None,
    source: LabSource | None = None,
    task_team: str | None = None,
) -> RunConfig | AssemblyFailure:
    """The run's config, or a failure (unknown agent or revision, unknown skill).

    `agent` is the definition to assemble: the latest, the revision the request names
    (`latest_revision` is then the latest, for the failure's message), or a canary's
    candidate (`canary` says which arm). `skills` maps each `wanted_skills` key to what the
    catalog holds. `source` is a lab run's source run. `catalog_revisions` records the
    revision of the agent and of every skill used. `task_team` is the team the run's task
    names: the run counts against the request's team (a flow's runs carry the flow's there),
    else its task's, else its agent's (docs/spend.md, "Teams"); a lab run resolves its own.
    """
    if agent is None:
        return _unknown_agent(request, latest_revision)
    definition = agent.definition
    docs: list[SkillDoc] = []
    revisions = {f"agent/{definition.id}": agent.revision}
    missing: list[str] = []
    hooks = definition.hooks  # the agent's rules first, then each skill's, in skill order
    sandbox_tools = list(definition.sandbox_tools)
    egress = list(definition.egress)  # the agent's grants, then each skill's
    for wanted in wanted_skills(definition, request.skill_revisions):
        stored = skills.get(wanted.key)
        if stored is None:
            missing.append(wanted.key)
            continue
        skill = stored.skill
        docs.append(
            SkillDoc(
                name=skill.name,
                version=skill.version,
                content=skill.content,
                on_demand=wanted.on_demand,
                description=skill.description,
            )
        )
        revisions[f"skill/{skill.name}"] = stored.revision
        hooks = hooks.merged(skill.hooks)
        # The agent's own tool wins a name clash: a skill cannot replace what the agent defines.
        taken = {t.name for t in sandbox_tools}
        sandbox_tools.extend(t for t in skill.sandbox_tools if t.name not in taken)
        egress.extend(skill.egress)
    if missing:
        return AssemblyFailure(
            Reason.UNKNOWN_SKILL,
            f"agent {definition.id!r} needs skill(s) missing from the catalog: "
            + ", ".join(missing),
            {"agent_id": definition.id, "skills": missing},
        )
    lab = request.lab
    model = definition.model
    if request.model is not None:
        model = model.model_copy(update={"name": request.model})
    return RunConfig(
        run_id=run_id,
        agent_id=definition.id,
        task_id=request.task_id or (source.task_id if source else None),
        input=request.input or (source.input if source else ""),
        origin=request.origin,
        system_prompt=definition.system_prompt,
        skills=docs,
        memory=memory,
        tools=definition.tools,
        permissions=definition.permissions
        if lab is None
        else lab_permissions(definition.permissions),
        mcp_servers=definition.mcp_servers,
        model=model,
        budgets=definition.budgets,
        repo=lab_repo(request, source),
        runtime=definition.runtime,
        catalog_revisions=revisions,
        max_concurrent_runs=definition.max_concurrent_runs,
        hooks=hooks,
        plan_mode=definition.plan_mode if request.plan_mode is None else request.plan_mode,
        output_schema=definition.output_schema,
        resume=definition.resume,
        sandbox_tools=sandbox_tools,
        egress=unique_grants(egress),
        lab=lab,
        canary=canary,
        team=request.team or task_team or definition.team,
        conversation=request.conversation or [],
    )


def _unknown_agent(request: RunRequested, latest_revision: int | None) -> AssemblyFailure:
    detail: dict[str, Any] = {"agent_id": request.agent_id}
    wanted = request.agent_revision
    if wanted is not None and latest_revision is not None:
        detail |= {"revision": wanted, "latest_revision": latest_revision}
        message = f"agent {request.agent_id!r} has no revision {wanted} (latest {latest_revision})"
        return AssemblyFailure(Reason.UNKNOWN_AGENT, message, detail)
    return AssemblyFailure(
        Reason.UNKNOWN_AGENT, f"no agent {request.agent_id!r} in the catalog", detail
    )


def request_fingerprint(request: RunRequested) -> str:
    """Hash of a request's content: equal for a redelivery or a repeat of the same body."""
    body = request.model_dump_json(exclude_none=True).encode()
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def generated_run_id(stream: str | None, seq: int | None, event_id: str) -> str:
    """Run id for a request published on the `new` token: derived from where the request sits
    in the stream, so a redelivery of that request gets the same id."""
    digest = hashlib.blake2b(f"{stream}:{seq}:{event_id}".encode(), digest_size=10).hexdigest()
    return f"run-{digest}"


def conflict_run_id(run_id: str, event_id: str) -> str:
    """Run id under which a conflicting request is failed, leaving the existing run untouched."""
    digest = hashlib.blake2b(event_id.encode(), digest_size=4).hexdigest()
    return f"{run_id[:100]}-conflict-{digest}"
