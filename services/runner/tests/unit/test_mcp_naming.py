"""How MCP tools are named and described to the model (pure)."""

from __future__ import annotations

import re

from mcp import types as mcp_types

from nexus_runner.tools.mcp import MAX_NAME, parameters_schema, result_text, tool_name

OPENAI_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def test_plain_names_follow_the_pattern() -> None:
    assert tool_name("github", "create_issue", set()) == "mcp_github__create_issue"


def test_invalid_characters_are_replaced() -> None:
    name = tool_name("fs", "read.file/v2", set())
    assert name == "mcp_fs__read_file_v2"
    assert OPENAI_NAME.fullmatch(name)


def test_long_names_are_cut_with_a_stable_hash() -> None:
    tool = "t" * 100
    name = tool_name("server", tool, set())
    assert len(name) == MAX_NAME
    assert OPENAI_NAME.fullmatch(name)
    assert name == tool_name("server", tool, set())  # stable across runs
    assert name != tool_name("server", tool + "x", set())


def test_a_collision_gets_a_hash() -> None:
    first = tool_name("fs", "read.file", set())
    second = tool_name("fs", "read_file", {first})
    assert first == "mcp_fs__read_file"
    assert second != first
    assert second.startswith("mcp_fs__read_file_")
    assert len(second) <= MAX_NAME


def test_schema_without_properties_gets_them() -> None:
    assert parameters_schema({"type": "object"}) == {"type": "object", "properties": {}}
    assert parameters_schema(None) == {"type": "object", "properties": {}}
    kept = parameters_schema(
        {"type": "object", "title": "x", "properties": {"a": {"type": "string"}}}
    )
    assert kept == {"type": "object", "properties": {"a": {"type": "string"}}}


def test_result_text_joins_text_and_falls_back_to_structured() -> None:
    text = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="a"),
            mcp_types.TextContent(type="text", text="b"),
        ]
    )
    assert result_text(text) == "a\nb"
    structured = mcp_types.CallToolResult(content=[], structured_content={"n": 1})
    assert result_text(structured) == '{"n": 1}'
    assert result_text(mcp_types.CallToolResult(content=[])) == "(no output)"
