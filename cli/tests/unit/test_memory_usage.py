"""`nexus memory ...` input errors: one line naming the option, exit 2, before any connection
(no servers here: a command that tried to connect would exit 4, the dev stack being down)."""

from __future__ import annotations

import pytest
from tests.support.cli import invoke as nexus

from nexus_cli.commands.memory import clip, why
from nexus_cli.errors import ExitCode


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("memory", "add", "x", "--scope", "bogus"), "--scope: invalid memory scope 'bogus'"),
        (("memory", "add", "x", "--scope", "agent:a.b"), "--scope: invalid memory scope"),
        (("memory", "add", "x", "--scope", "global:x"), "--scope: the global memory scope"),
        (("memory", "add", "x", "--scope", "agent:"), "--scope: memory scope agent needs an id"),
        (("memory", "add", "x", "-s", "global", "--kind", "Fact!"), "--kind: String should"),
        (("memory", "add", "", "-s", "global"), "TEXT: String should have at least 1 character"),
        (("memory", "add", "x" * 4001, "-s", "global"), "TEXT: String should have at most 4000"),
        (("memory", "search", "q"), "--scope: name at least one scope to search"),
        (("memory", "search", "q", "-s", "wat:x"), "--scope: invalid memory scope kind 'wat'"),
        (("memory", "search", "q", "-s", "global", "--limit", "0"), "--limit: Input should be"),
        (("memory", "search", "q", "-s", "global", "--limit", "101"), "--limit: Input should"),
        (("memory", "ls", "--scope", "nope"), "--scope: invalid memory scope 'nope'"),
        (("memory", "ls", "--cursor", "-1"), "--cursor: Input should be greater than"),
        (("memory", "forget", "mem.1"), "ID: String should match pattern"),
        (("memory", "forget", "m", "--reason", "r" * 501), "--reason: String should have at"),
        (("memory", "consolidate", "--scope", "x:y"), "--scope: invalid memory scope kind"),
        (("projections", "rebuild", "memories"), "unknown projection 'memories'"),
    ],
)
def test_invalid_memory_input_exits_2_with_one_line(
    env: dict[str, str], args: tuple[str, ...], message: str
) -> None:
    result = nexus(env, *args)
    assert result.exit_code == ExitCode.INVALID, result.output
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2  # the error, at most a hint


def test_unknown_projection_lists_memory(env: dict[str, str]) -> None:
    result = nexus(env, "projections", "rebuild", "nope")
    assert "hint: one of: agent_runs, board, memory" in result.stderr


def test_json_errors_are_one_json_object(env: dict[str, str]) -> None:
    result = nexus(env, "memory", "search", "q", "-s", "bad", "-o", "json")
    assert result.exit_code == ExitCode.INVALID
    assert result.stdout == ""
    assert '"message": "--scope: invalid memory scope' in result.stderr


def test_valid_input_goes_on_to_connect(env: dict[str, str]) -> None:
    # The same command with good input passes validation and fails only to find a stack.
    result = nexus(env, "memory", "add", "x", "--scope", "repo:https://github.com/acme/app.git")
    assert result.exit_code == ExitCode.UNAVAILABLE
    assert "the dev stack is not running" in result.stderr


def test_typer_usage_errors_exit_2(env: dict[str, str]) -> None:
    assert nexus(env, "memory", "add", "x").exit_code == 2  # --scope is required
    assert nexus(env, "memory", "ls", "--limit", "0").exit_code == 2
    assert nexus(env, "memory", "search", "q", "-s", "global", "-o", "yaml").exit_code == 2


def test_why_names_the_retrievers_and_weights() -> None:
    item = {
        "current": False,
        "why": {
            "semantic_rank": 1,
            "similarity": 0.8123,
            "lexical_rank": 3,
            "recency": 0.5,
            "kind_weight": 1.2,
            "access_count": 4,
        },
    }
    assert why(item) == (
        "meaning #1 (0.81), words #3, recency x0.50, kind x1.20, used 4x, not current"
    )
    assert why({"why": {"lexical_rank": 2, "recency": 1.0, "kind_weight": 1.0}}) == "words #2"


def test_clip_keeps_short_text_and_cuts_long_text_to_the_width() -> None:
    assert clip("a  b\nc") == "a b c"
    long = clip("x" * 500, 20)
    assert (len(long), long[-1]) == (20, "…")
