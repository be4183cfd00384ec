"""The pure assembly decision: config from agent + skills + memory, or a reason code."""

from __future__ import annotations

from nexus_events.contract.documents import parse_agent, parse_skill
from nexus_events.events import (
    ConversationMessage,
    MemoryContext,
    MemoryItem,
    Reason,
    RunConfig,
    RunRequested,
)

from nexus_core.assembly import (
    AssemblyFailure,
    assemble,
    conflict_run_id,
    generated_run_id,
    request_fingerprint,
)
from nexus_core.catalog_store import StoredAgent, StoredSkill

AGENT = StoredAgent(
    parse_agent(
        "id: impl\nrole: implementer\nmodel: {name: m}\nsystem_prompt: Do it.\n"
        "skills: [python, git@2]\ntools: [read_file]\npermissions: {can_push: true}\n"
    ),
    revision=3,
    updated_at=None,
)
PY = StoredSkill(parse_skill("---\nname: python\nversion: '5'\n---\nUse uv."), 7, None)
GIT = StoredSkill(parse_skill("---\nname: git\nversion: '2'\n---\nRebase."), 2, None)
REQUEST = RunRequested(agent_id="impl", task_id="T-1", input="fix it", repo="/src/x")
MEMORY = MemoryContext(status="ok", items=[MemoryItem(memory_id="m1", text="uses uv")])


def test_assembles_the_full_config():
    config = assemble("r1", REQUEST, AGENT, {"python": PY, "git@2": GIT}, MEMORY)
    assert isinstance(config, RunConfig)
    assert (config.run_id, config.agent_id, config.task_id, config.input) == (
        "r1",
        "impl",
        "T-1",
        "fix it",
    )
    assert config.system_prompt == "Do it."
    assert [(s.name, s.version, s.content) for s in config.skills] == [
        ("python", "5", "Use uv."),
        ("git", "2", "Rebase."),
    ]
    assert config.memory == MEMORY
    assert [t.name for t in config.tools] == ["read_file"]
    assert config.permissions.can_push is True
    assert config.repo is not None
    assert config.repo.url == "/src/x"
    assert config.catalog_revisions == {"agent/impl": 3, "skill/python": 7, "skill/git": 2}


def _agent(extra_yaml: str) -> StoredAgent:
    """A minimal stored agent `impl` with `extra_yaml` added to its definition."""
    return StoredAgent(
        parse_agent(
            "id: impl\nrole: implementer\nmodel: {name: m}\nsystem_prompt: Do it.\n" + extra_yaml
        ),
        revision=1,
        updated_at=None,
    )


def test_copies_the_agent_admission_limit():
    limited = _agent("max_concurrent_runs: 2\n")
    config = assemble("r1", REQUEST, limited, {}, MEMORY)
    assert isinstance(config, RunConfig)
    assert config.max_concurrent_runs == 2
    unlimited = assemble("r1", REQUEST, AGENT, {"python": PY, "git@2": GIT}, MEMORY)
    assert isinstance(unlimited, RunConfig)
    assert unlimited.max_concurrent_runs is None


def test_copies_the_agent_output_schema():
    schema = {"type": "object", "required": ["verdict"]}
    typed = _agent("output_schema:\n  type: object\n  required: [verdict]\n")
    config = assemble("r1", REQUEST, typed, {}, MEMORY)
    assert isinstance(config, RunConfig)
    assert config.output_schema == schema
    untyped = assemble("r1", REQUEST, AGENT, {"python": PY, "git@2": GIT}, MEMORY)
    assert isinstance(untyped, RunConfig)
    assert untyped.output_schema is None


def test_unknown_agent():
    result = assemble("r1", REQUEST, None, {}, MEMORY)
    assert isinstance(result, AssemblyFailure)
    assert result.reason == Reason.UNKNOWN_AGENT


def test_unknown_skill_names_every_missing_one():
    result = assemble("r1", REQUEST, AGENT, {"python": None, "git@2": None}, MEMORY)
    assert isinstance(result, AssemblyFailure)
    assert result.reason == Reason.UNKNOWN_SKILL
    assert result.detail["skills"] == ["python", "git@2"]


def test_ids_are_deterministic_tokens():
    assert generated_run_id("S", 4, "e") == generated_run_id("S", 4, "e")
    assert generated_run_id("S", 4, "e") != generated_run_id("S", 5, "e")
    long_id = "x" * 128
    assert len(conflict_run_id(long_id, "e")) <= 128
    same = RunRequested(agent_id="impl", task_id="T-1", input="fix it", repo="/src/x")
    assert request_fingerprint(same) == request_fingerprint(REQUEST)
    assert request_fingerprint(same) != request_fingerprint(RunRequested(agent_id="impl"))


def test_carries_the_mcp_servers():
    agent = _agent(
        "mcp_servers: [{name: fs, command: mcp-fs, tools: [read], auto_approve: [read]}]\n"
    )
    config = assemble("r1", REQUEST, agent, {}, MEMORY)
    assert isinstance(config, RunConfig)
    assert [(s.name, s.command, s.tools, s.auto_approve) for s in config.mcp_servers] == [
        ("fs", "mcp-fs", ["read"], ["read"])
    ]
    assert assemble("r1", REQUEST, AGENT, {"python": PY, "git@2": GIT}, MEMORY).mcp_servers == []  # type: ignore[union-attr]


def test_plan_mode_from_the_definition_unless_the_request_says_otherwise():
    planning = _agent("plan_mode: true\n")
    config = assemble("r1", REQUEST, planning, {}, MEMORY)
    assert isinstance(config, RunConfig)
    assert config.plan_mode is True
    plain = _agent("")
    config = assemble("r1", REQUEST, plain, {}, MEMORY)
    assert isinstance(config, RunConfig)
    assert config.plan_mode is False
    for asked in (True, False):
        request = REQUEST.model_copy(update={"plan_mode": asked})
        for agent in (planning, plain):
            config = assemble("r1", request, agent, {}, MEMORY)
            assert isinstance(config, RunConfig)
            assert config.plan_mode is asked


def test_egress_grants_are_the_agents_then_its_skills_without_repeats():
    agent = _agent(
        "skills: [python]\negress: [{host: pypi.org}, {host: '*.example.com', port: 8443}]\n"
    )
    skill = StoredSkill(
        parse_skill(
            "---\nname: python\nversion: '5'\n"
            "egress: [{host: files.pythonhosted.org}, {host: pypi.org}]\n---\nUse uv."
        ),
        7,
        None,
    )
    config = assemble("r1", REQUEST, agent, {"python": skill}, MEMORY)
    assert isinstance(config, RunConfig)
    assert [(g.host, g.port) for g in config.egress] == [
        ("pypi.org", None),
        ("*.example.com", 8443),
        ("files.pythonhosted.org", None),
    ]
    no_grants = assemble("r1", REQUEST, AGENT, {"python": PY, "git@2": GIT}, MEMORY)
    assert isinstance(no_grants, RunConfig)
    assert no_grants.egress == []


def test_the_team_is_the_requests_else_the_tasks_else_the_agents():
    """docs/spend.md, "Teams": a flow's runs carry the flow's team on the request."""
    agent = _agent("team: agents-team\n")
    plain = RunRequested(agent_id="impl", task_id="T-1")
    asked = plain.model_copy(update={"team": "asked"})

    def team(request: RunRequested, task_team: str | None, stored: StoredAgent) -> str | None:
        config = assemble("r1", request, stored, {}, MEMORY, task_team=task_team)
        assert isinstance(config, RunConfig)
        return config.team

    assert team(asked, "tasks-team", agent) == "asked"
    assert team(plain, "tasks-team", agent) == "tasks-team"
    assert team(plain, None, agent) == "agents-team"
    assert team(plain, None, _agent("")) is None


def test_a_chat_conversation_so_far_reaches_the_config_in_order():
    """docs/channels.md, "Conversations": the run's transcript begins with it."""
    said = [
        ConversationMessage(role="user", text="my name is Ana"),
        ConversationMessage(role="assistant", text="hello Ana"),
    ]
    request = REQUEST.model_copy(update={"conversation": said})
    config = assemble("r1", request, AGENT, {"python": PY, "git@2": GIT}, MEMORY)
    assert isinstance(config, RunConfig)
    assert config.conversation == said
    plain = assemble("r2", REQUEST, AGENT, {"python": PY, "git@2": GIT}, MEMORY)
    assert isinstance(plain, RunConfig)
    assert plain.conversation == []


def test_a_request_without_a_conversation_keeps_the_fingerprint_it_had_before_the_field():
    """A request stored before `conversation` existed, redelivered after an upgrade, must not
    look like another request under the same run id (run_id_conflict)."""
    from nexus_core.assembly import request_fingerprint

    stored = RunRequested.model_validate({"agent_id": "impl", "input": "fix it"})
    assert '"conversation"' not in stored.model_dump_json(exclude_none=True)
    assert request_fingerprint(stored) == request_fingerprint(
        RunRequested.model_validate_json(stored.model_dump_json(exclude_none=True))
    )
