"""The pure parts of assembly the lab adds (docs/lab.md): skills at pinned revisions, a lab
run's permissions and source, and the deterministic draw of a canary arm."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from nexus_events.events import AgentDefinition, RunRequested
from nexus_events.events.lab_specs import CanaryArm, CanarySpec
from nexus_events.events.specs import Permissions, RepoSpec


@dataclass(frozen=True)
class WantedSkill:
    """One skill a run is assembled with: the agent's reference, or a revision the request
    pins (`revision` set, then `version` is ignored)."""

    key: str
    name: str
    version: str | None
    revision: int | None
    on_demand: bool


def skill_key(name: str, version: str | None) -> str:
    """Key of a skill reference: ``name`` (latest) or ``name@version`` (pinned)."""
    return name if version is None else f"{name}@{version}"


def revision_key(name: str, revision: int) -> str:
    """Key of a skill pinned to a catalog revision: ``name#revision``."""
    return f"{name}#{revision}"


def wanted_skills(
    definition: AgentDefinition, skill_revisions: Mapping[str, int]
) -> list[WantedSkill]:
    """The agent's skills in its order, each pinned where the request pins it, then the
    pinned skills the agent does not name (sorted by name, so the order is the request's
    content, not its key order)."""
    wanted: list[WantedSkill] = []
    named = set()
    for ref in definition.skills:
        named.add(ref.name)
        on_demand = ref.load == "on_demand"
        pinned = skill_revisions.get(ref.name)
        if pinned is None:
            key = skill_key(ref.name, ref.version)
            wanted.append(WantedSkill(key, ref.name, ref.version, None, on_demand))
        else:
            key = revision_key(ref.name, pinned)
            wanted.append(WantedSkill(key, ref.name, None, pinned, on_demand))
    for name in sorted(set(skill_revisions) - named):
        revision = skill_revisions[name]
        wanted.append(WantedSkill(revision_key(name, revision), name, None, revision, False))
    return wanted


@dataclass(frozen=True)
class LabSource:
    """What a lab run takes from its source run (read from agent_runs)."""

    run_id: str
    repo: RepoSpec | None
    base_commit: str | None
    task_id: str | None
    input: str
    turns: int


def lab_permissions(permissions: Permissions) -> Permissions:
    """A lab run's work stays in its workspace: no push, pull request or merge."""
    return permissions.model_copy(
        update={"can_push": False, "can_open_pr": False, "can_merge": False}
    )


def lab_repo(request: RunRequested, source: LabSource | None) -> RepoSpec | None:
    """The request's repository; for a lab run naming none, the source's, at the commit the
    source started from when it was recorded."""
    if request.repo is not None or source is None or source.repo is None:
        return request.repo
    if source.base_commit is None:
        return source.repo
    return source.repo.model_copy(update={"ref": source.base_commit})


def canary_draw(run_id: str) -> float:
    """A fraction in [0, 1) fixed by the run id: the same run always draws the same arm."""
    digest = hashlib.sha256(run_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def canary_arm(run_id: str, current_revision: int, spec: CanarySpec) -> CanaryArm:
    """The arm of `spec` a run gets: the candidate when its draw falls under the share."""
    arm = "candidate" if canary_draw(run_id) < spec.share else "current"
    return CanaryArm(
        arm=arm,
        candidate_revision=spec.revision,
        current_revision=current_revision,
        share=spec.share,
    )
