"""Parsing chat messages into commands, and the short codes people type."""

from __future__ import annotations

import pytest

from nexus_channel_gateway.codes import ALPHABET, normalize, short_code
from nexus_channel_gateway.commands import (
    ApprovalAnswer,
    FlowCommand,
    Invalid,
    RunCommand,
    Text,
    parse,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "<@U0BOT> run implementer: fix the login bug",
            RunCommand("implementer", "fix the login bug"),
        ),
        ("@nexus run reviewer review PR 12", RunCommand("reviewer", "review PR 12")),
        ("run tester:\nline one\nline two", RunCommand("tester", "line one\nline two")),
        ("<@U0BOT> flow feature: do X", FlowCommand("feature", "do X")),
        ("flow feature add dark mode", FlowCommand("feature", "add dark mode")),
        ("yes K7MX2", ApprovalAnswer("K7MX2", "approve")),
        ("<@U0BOT> no k7mx2", ApprovalAnswer("K7MX2", "deny")),
        ("approve ABCDE.", ApprovalAnswer("ABCDE", "approve")),
        ("please also check the tests", Text("please also check the tests")),
        ("yes I think so", Text("yes I think so")),
    ],
)
def test_parse(text: str, expected: object) -> None:
    assert parse(text) == expected


def test_invalid_run_requests_say_why() -> None:
    bad_agent = parse("run a.b: x")
    assert isinstance(bad_agent, Invalid)
    assert "agent id" in bad_agent.reason
    nothing = parse("run implementer:")
    assert isinstance(nothing, Invalid)
    assert "what implementer should do" in nothing.reason
    bad_flow = parse("flow a.b: x")
    assert isinstance(bad_flow, Invalid)
    assert "flow id" in bad_flow.reason
    empty_flow = parse("flow feature:")
    assert isinstance(empty_flow, Invalid)
    assert "flow feature: <what to do>" in empty_flow.reason


def test_short_codes_are_deterministic_unambiguous_and_distinct() -> None:
    assert short_code("k1") == short_code("k1")
    assert short_code("k1") != short_code("k2")
    assert short_code("k1", salt="a") != short_code("k1", salt="b")
    codes = {short_code(f"key-{i}", length=5) for i in range(2000)}
    assert len(codes) > 1990  # 31^5 values: collisions are rare
    assert all(set(c) <= set(ALPHABET) for c in codes)
    assert not set("01OIL") & set(ALPHABET)
    assert normalize(" k7mx ") == "K7MX"
