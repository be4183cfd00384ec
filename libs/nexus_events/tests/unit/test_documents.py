"""Agent and skill documents: valid ones parse, invalid ones report every bad field."""

from __future__ import annotations

import json

import pytest
from nexus_events.contract.documents import parse_agent, parse_skill, render_skill
from nexus_events.errors import DocumentInvalid

AGENT_YAML = """
id: implementer
role: implementer
description: Writes code
model: {provider: openai, name: gpt-4o, temperature: 0.1}
system_prompt: You implement tasks.
skills: [python, git@2]
tools: [read_file, {name: run_shell, options: {timeout: 30}}]
permissions: {can_commit: true, network_egress: [pypi.org]}
budgets: {max_turns: 10}
runtime: {image: runner:1, cpu: "2"}
"""


def test_agent_yaml_parses_with_shorthands():
    agent = parse_agent(AGENT_YAML)
    assert agent.id == "implementer"
    assert [(s.name, s.version) for s in agent.skills] == [("python", None), ("git", "2")]
    assert [t.name for t in agent.tools] == ["read_file", "run_shell"]
    assert agent.tools[1].options == {"timeout": 30}
    assert agent.permissions.can_commit is True
    assert agent.budgets.max_turns == 10


def test_agent_json_parses():
    doc = {"id": "a1", "role": "reviewer", "model": {"name": "m"}, "system_prompt": "p"}
    assert parse_agent(json.dumps(doc)).role == "reviewer"


def test_agent_errors_are_reported_field_by_field():
    doc = """
id: bad.id
role: wizard
model: {name: ""}
permissions: {can_comit: true}
budgets: {max_turns: 0}
"""
    with pytest.raises(DocumentInvalid) as info:
        parse_agent(doc)
    locs = {e.loc for e in info.value.errors}
    assert {
        "id",
        "role",
        "model.name",
        "system_prompt",
        "permissions.can_comit",
        "budgets.max_turns",
    } <= locs


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("id: [unclosed", "not valid YAML at line 1"),
        ("- a\n- b", "must be a mapping, got list"),
        ("", "got nothing"),
    ],
)
def test_agent_not_a_mapping(text, fragment):
    with pytest.raises(DocumentInvalid) as info:
        parse_agent(text)
    assert [e.loc for e in info.value.errors] == ["(document)"]
    assert fragment in info.value.errors[0].msg


def test_skill_front_matter_and_metadata():
    skill = parse_skill("---\nname: python\nversion: 2\nauthor: ops\n---\n# Python\nUse uv.\n")
    assert (skill.name, skill.version, skill.metadata) == ("python", "2", {"author": "ops"})
    assert skill.content == "# Python\nUse uv."
    assert parse_skill(render_skill(skill)) == skill


def test_skill_name_from_caller():
    assert parse_skill("---\nversion: 1.0.0\n---\nbody", name="git").name == "git"


def test_skill_errors():
    with pytest.raises(DocumentInvalid) as info:
        parse_skill("---\nname: bad name\n---\n")
    locs = {e.loc for e in info.value.errors}
    assert locs == {"name", "version", "content"}
    with pytest.raises(DocumentInvalid, match="front matter"):
        parse_skill("# no front matter")


MCP_AGENT = """
id: triager
role: custom
model: {name: m}
system_prompt: Triage.
mcp_servers:
  - name: github
    command: npx
    args: [-y, "@modelcontextprotocol/server-github"]
    env: {GITHUB_PERSONAL_ACCESS_TOKEN: github-token}
    tools: [search_issues, create_issue]
    auto_approve: [search_issues]
    call_timeout: 10
  - name: docs
    transport: http
    url: https://docs.example/mcp
    tools: ["*"]
"""


def test_agent_with_mcp_servers_parses():
    agent = parse_agent(MCP_AGENT)
    github, docs = agent.mcp_servers
    assert (github.transport, github.command, github.args[0]) == ("stdio", "npx", "-y")
    assert github.env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "github-token"}
    assert github.auto_approve == ["search_issues"]
    assert github.call_timeout == 10
    assert github.startup_timeout is None
    assert (docs.transport, docs.url, docs.tools) == ("http", "https://docs.example/mcp", ["*"])


def test_mcp_server_errors_are_reported_field_by_field():
    doc = """
id: triager
role: custom
model: {name: m}
system_prompt: Triage.
mcp_servers:
  - {name: gh, command: npx, tools: [a], comand: npx}
  - {name: bad__name, command: x, tools: [a]}
  - {name: nocmd, tools: [a]}
  - {name: notools, command: x}
  - {name: env, command: x, tools: [a], env: {"1BAD": s}}
  - {name: web, transport: http, tools: [a], command: x, url: "http://x"}
"""
    with pytest.raises(DocumentInvalid) as info:
        parse_agent(doc)
    errors = {e.loc: e.msg for e in info.value.errors}
    assert "mcp_servers.0.comand" in errors  # unknown field
    assert "mcp_servers.1.name" in errors
    assert "command is required" in errors["mcp_servers.2"]
    assert "mcp_servers.3.tools" in errors
    assert "1BAD" in errors["mcp_servers.4.env"]
    assert "only for a stdio server" in errors["mcp_servers.5"]


def test_mcp_server_names_are_unique():
    doc = MCP_AGENT.replace("name: docs", "name: github")
    with pytest.raises(DocumentInvalid) as info:
        parse_agent(doc)
    assert any("duplicate MCP server name(s): github" in e.msg for e in info.value.errors)
