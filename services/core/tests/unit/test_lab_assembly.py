"""The lab's part of the pure assembly: revisions, model override, on-demand skills, lab runs
(permissions, source repo/commit/task) and the canary's draw."""

from __future__ import annotations

from nexus_events.contract.documents import parse_agent, parse_skill
from nexus_events.events import MemoryContext, Reason, RunConfig, RunRequested
from nexus_events.events.lab_specs import CanarySpec, LabMode, LabSpec
from nexus_events.events.specs import RepoSpec

from nexus_core.assembly import AssemblyFailure, assemble
from nexus_core.catalog_store import StoredAgent, StoredSkill
from nexus_core.lab_assembly import LabSource, canary_arm, canary_draw, wanted_skills

AGENT = StoredAgent(
    parse_agent(
        "id: impl\nrole: implementer\nmodel: {name: m, temperature: 0.3}\nsystem_prompt: Do it.\n"
        "skills: [python, {name: git, load: on_demand}]\ntools: [read_file]\n"
        "permissions: {can_commit: true, can_push: true, can_open_pr: true, can_merge: true}\n"
    ),
    revision=3,
    updated_at=None,
)
PY = StoredSkill(parse_skill("---\nname: python\nversion: '5'\n---\nUse uv."), 7, None)
PY_OLD = StoredSkill(parse_skill("---\nname: python\nversion: '4'\n---\nUse pip."), 2, None)
GIT = StoredSkill(
    parse_skill("---\nname: git\nversion: '2'\ndescription: Rebasing safely\n---\nRebase."), 4, None
)
MEMORY = MemoryContext(status="disabled")


def _config(request: RunRequested, **kwargs: object) -> RunConfig:
    skills = {"python": PY, "git": GIT, "python#2": PY_OLD}
    config = assemble("r1", request, AGENT, skills, MEMORY, **kwargs)  # type: ignore[arg-type]
    assert isinstance(config, RunConfig), config
    return config


def test_on_demand_skill_and_description_reach_the_config():
    config = _config(RunRequested(agent_id="impl"))
    assert [(s.name, s.on_demand, s.description) for s in config.skills] == [
        ("python", False, ""),
        ("git", True, "Rebasing safely"),
    ]


def test_skill_revisions_and_model_override():
    config = _config(RunRequested(agent_id="impl", skill_revisions={"python": 2}, model="m2"))
    assert [(s.name, s.content) for s in config.skills] == [
        ("python", "Use pip."),
        ("git", "Rebase."),
    ]
    assert config.catalog_revisions == {"agent/impl": 3, "skill/python": 2, "skill/git": 4}
    assert (config.model.name, config.model.temperature) == ("m2", 0.3)


def test_a_pinned_skill_the_agent_does_not_name_is_added_and_a_missing_one_fails():
    keys = [w.key for w in wanted_skills(AGENT.definition, {"zeta": 1, "alpha": 2})]
    assert keys == ["python", "git", "alpha#2", "zeta#1"]
    failure = assemble(
        "r1", RunRequested(agent_id="impl", skill_revisions={"python": 9}), AGENT,
        {"python#9": None, "git": GIT}, MEMORY,
    )  # fmt: skip
    assert isinstance(failure, AssemblyFailure)
    assert failure.reason == Reason.UNKNOWN_SKILL
    assert "python#9" in failure.message


def test_unknown_agent_revision_names_the_latest():
    failure = assemble(
        "r1", RunRequested(agent_id="impl", agent_revision=9), None, {}, MEMORY, latest_revision=4
    )
    assert isinstance(failure, AssemblyFailure)
    assert failure.reason == Reason.UNKNOWN_AGENT
    assert failure.message == "agent 'impl' has no revision 9 (latest 4)"
    plain = assemble("r1", RunRequested(agent_id="nope"), None, {}, MEMORY)
    assert isinstance(plain, AssemblyFailure)
    assert plain.message == "no agent 'nope' in the catalog"


def test_a_lab_run_loses_push_pr_merge_and_takes_the_source_repo_at_its_base_commit():
    lab = LabSpec(mode=LabMode.REPLAY, source_run_id="src")
    source = LabSource(
        run_id="src",
        repo=RepoSpec(url="/src/x", ref="main"),
        base_commit="abc123",
        task_id="T-9",
        input="the source's task",
        turns=4,
    )
    config = _config(RunRequested(agent_id="impl", lab=lab, origin="lab"), source=source)
    assert config.lab == lab
    p = config.permissions
    assert (p.can_commit, p.can_push, p.can_open_pr, p.can_merge) == (True, False, False, False)
    assert config.repo == RepoSpec(url="/src/x", ref="abc123")
    assert (config.task_id, config.input, config.origin) == ("T-9", "the source's task", "lab")
    own = _config(
        RunRequested(agent_id="impl", lab=lab, repo="/other", task_id="T-1", input="mine"),
        source=source,
    )
    assert own.repo == RepoSpec(url="/other")
    assert (own.task_id, own.input) == ("T-1", "mine")
    unrecorded = _config(
        RunRequested(agent_id="impl", lab=lab),
        source=LabSource("src", RepoSpec(url="/src/x", ref="main"), None, None, "", 1),
    )
    assert unrecorded.repo == RepoSpec(url="/src/x", ref="main")
    assert _config(RunRequested(agent_id="impl")).permissions.can_push is True


def test_the_canary_draw_is_fixed_by_the_run_id():
    draws = [canary_draw(f"run-{i}") for i in range(200)]
    assert draws == [canary_draw(f"run-{i}") for i in range(200)]
    assert all(0 <= d < 1 for d in draws)
    assert len(set(draws)) == 200
    spec = CanarySpec(revision=2, share=0.3)
    arms = [canary_arm(f"run-{i}", 5, spec) for i in range(200)]
    assert {a.arm for a in arms} == {"candidate", "current"}
    assert all((a.arm == "candidate") == (d < 0.3) for a, d in zip(arms, draws, strict=True))
    assert (arms[0].candidate_revision, arms[0].current_revision, arms[0].share) == (2, 5, 0.3)
    every = CanarySpec(revision=2, share=1.0)
    assert all(canary_arm(f"run-{i}", 5, every).arm == "candidate" for i in range(50))
