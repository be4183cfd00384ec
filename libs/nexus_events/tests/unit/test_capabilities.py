"""Capability tokens fail closed: anything that does not parse refuses the definition."""

from __future__ import annotations

import pytest
from nexus_events.contract import capabilities
from nexus_events.contract.documents import parse_agent
from nexus_events.errors import DocumentInvalid
from nexus_events.events import AgentDefinition, SandboxTool, SkillDefinition
from pydantic import ValidationError

SOURCE = "async function run(args) { return 1 }"


@pytest.mark.parametrize(
    "token",
    [
        "workspace:read:src/**/*.py",
        "workspace:write:out/*.txt",
        "events:emit:report.ready",
        "memory:read:project",
        "http:api.example.com",
        "http:*.example.com",
        "state:read:*",
        "state:write:counter",
    ],
)
def test_every_kind_parses(token: str) -> None:
    assert capabilities.parse(token).token == token


@pytest.mark.parametrize(
    "token",
    [
        "workspace:delete:*",  # unknown verb
        "fs:read:*",  # unknown kind
        "workspace:read:",  # empty target
        "workspace:read:/etc/passwd",  # absolute
        "workspace:write:../x",  # escapes
        "state:write:a:b",  # stray colon
        "http:",  # no host
        "http:exa mple.com",
        " state:read:x",
        "",
        "view:update:*",  # the reactor's token, not one of Nexus's
    ],
)
def test_unknown_or_malformed_tokens_are_errors_naming_the_token(token: str) -> None:
    with pytest.raises(capabilities.CapabilityError) as info:
        capabilities.parse(token)
    assert repr(token) in str(info.value)


def test_grants_match_and_read_only() -> None:
    grants = capabilities.Grants.of(["workspace:read:src/*.py", "http:*.example.com"])
    assert grants.allows("workspace:read", "src/a.py")
    assert not grants.allows("workspace:read", "secrets.env")
    assert not grants.allows("workspace:write", "src/a.py")
    assert grants.allows("http", "API.example.com")
    assert not grants.allows("http", "example.org")
    assert not grants.read_only
    assert capabilities.Grants.of(["state:read:*", "memory:read:x"]).read_only


def test_a_definition_with_a_bad_token_is_refused() -> None:
    with pytest.raises(ValidationError, match="workspace:rm:x"):
        SandboxTool(name="t", description="d", source=SOURCE, capabilities=["workspace:rm:x"])
    doc = (
        "id: a\nrole: custom\nmodel: {name: m}\nsystem_prompt: hi\nsandbox_tools:\n"
        "  - {name: t, description: d, source: 'x', capabilities: ['net:*']}\n"
    )
    with pytest.raises(DocumentInvalid) as info:
        parse_agent(doc)
    assert [e.loc for e in info.value.errors] == ["sandbox_tools.0.capabilities"]
    assert "'net:*'" in info.value.errors[0].msg


def test_agent_and_skill_carry_sandbox_tools() -> None:
    tool = SandboxTool(name="t", description="d", source=SOURCE, capabilities=["state:read:*"])
    assert tool.read_only
    assert tool.limits.memory_mb == 32
    assert tool.limits.wall_seconds == 5
    agent = AgentDefinition.model_validate(
        {
            "id": "a",
            "role": "custom",
            "model": {"name": "m"},
            "system_prompt": "s",
            "sandbox_tools": [tool.model_dump()],
        }
    )
    assert agent.sandbox_tools == [tool]
    with pytest.raises(ValidationError, match="duplicate sandboxed tool"):
        SkillDefinition(name="s", version="1", content="c", sandbox_tools=[tool, tool])
