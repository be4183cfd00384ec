"""A skill's policy hooks reach the run after the agent's own."""

from __future__ import annotations

from nexus_events.contract.documents import parse_agent, parse_skill, render_skill
from nexus_events.events import MemoryContext, RunConfig, RunRequested

from nexus_core.assembly import assemble
from nexus_core.catalog_store import StoredAgent, StoredSkill

AGENT = StoredAgent(
    parse_agent(
        "id: impl\nrole: implementer\nmodel: {name: m}\nsystem_prompt: Do it.\nskills: [guard]\n"
        "permissions: {auto_approve: curated}\n"
        "hooks:\n  before_tool_call:\n    - {name: mine, tool: run_shell, decision: ask}\n"
    ),
    revision=1,
    updated_at=None,
)
SKILL_DOC = (
    "---\nname: guard\nversion: '1'\nhooks:\n  before_tool_call:\n"
    "    - {name: skills, tool: read_file, path: '*.env', decision: deny}\n"
    "  after_tool_call:\n    - {name: mask, decision: redact, redact: ['tok-[0-9]+']}\n"
    "---\nBe careful.\n"
)


def test_skill_hooks_follow_the_agents() -> None:
    skill = parse_skill(SKILL_DOC)
    assert parse_skill(render_skill(skill)) == skill  # hooks survive the round trip
    config = assemble(
        "r1",
        RunRequested(agent_id="impl"),
        AGENT,
        {"guard": StoredSkill(skill, 1, None)},
        MemoryContext(),
    )
    assert isinstance(config, RunConfig)
    assert [r.name for r in config.hooks.before_tool_call] == ["mine", "skills"]
    assert [r.name for r in config.hooks.after_tool_call] == ["mask"]
    assert config.permissions.auto_approve == "curated"
    assert "hooks" not in skill.metadata
