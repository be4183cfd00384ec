"""A dial value or hook rule that does not parse is refused at apply, one line naming it."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import invoke as nexus

from nexus_cli.errors import ExitCode

HEAD = "id: a\nrole: implementer\nmodel: {name: m}\nsystem_prompt: hi\n"


def test_bad_dial_and_hook_rules_are_refused_at_apply(env: dict[str, str], tmp_path: Path) -> None:
    docs = tmp_path / "agents"
    docs.mkdir()
    (docs / "dial.yaml").write_text(HEAD + "permissions: {auto_approve: sometimes}\n")
    (docs / "regex.yaml").write_text(
        HEAD.replace("id: a", "id: b")
        + "hooks:\n  before_tool_call:\n    - {tool: run_shell, args: {command: 're:(curl'},"
        " decision: deny}\n"
    )
    (docs / "verb.yaml").write_text(
        HEAD.replace("id: a", "id: c")
        + "hooks:\n  after_tool_call:\n    - {name: later, tool: '*', decision: ask}\n"
    )
    (docs / "cls.yaml").write_text(
        HEAD.replace("id: a", "id: d")
        + "hooks:\n  before_tool_call:\n    - {command_class: [scary], decision: deny}\n"
    )
    result = nexus(env, "agents", "apply", "-f", str(docs))
    assert result.exit_code == ExitCode.INVALID
    assert "nothing was applied" in result.stderr
    lines = result.stderr.splitlines()
    expected = [
        f"{docs / 'dial.yaml'}: permissions.auto_approve: Input should be 'off', 'curated'",
        f"{docs / 'regex.yaml'}: hooks.before_tool_call.0.args: Value error, args.command:"
        " not a valid regular expression",
        f"{docs / 'verb.yaml'}: hooks.after_tool_call: Value error, rule later:"
        " after_tool_call decides redact or deny",
        f"{docs / 'cls.yaml'}: hooks.before_tool_call.0.command_class.0: Input should be",
    ]
    for start in expected:
        assert sum(line.strip().startswith(start) for line in lines) == 1, (start, lines)


def test_a_skill_with_a_bad_hook_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "py.md").write_text(
        "---\nname: py\nversion: '1'\nhooks:\n  before_tool_call:\n"
        "    - {tool: x, decision: redact, redact: [a]}\n---\nUse uv.\n"
    )
    result = nexus(env, "skills", "apply", "-f", str(tmp_path))
    assert result.exit_code == ExitCode.INVALID
    assert "py.md: hooks.before_tool_call: Value error, rule #1: redact applies" in result.stderr
