"""A sandboxed tool's capability token that does not parse is refused at apply, one line
naming it, and nothing is applied (fails closed: never read as a grant)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import invoke as nexus

from nexus_cli.errors import ExitCode

HEAD = "id: a\nrole: custom\nmodel: {name: m}\nsystem_prompt: hi\n"
TOOL = "  - name: t\n    description: d\n    source: 'async function run() {}'\n"


def test_unknown_and_malformed_tokens_are_refused_at_apply(
    env: dict[str, str], tmp_path: Path
) -> None:
    docs = tmp_path / "agents"
    docs.mkdir()
    (docs / "unknown.yaml").write_text(
        HEAD + "sandbox_tools:\n" + TOOL + "    capabilities: ['workspace:read:*', 'fs:rm:*']\n"
    )
    (docs / "escape.yaml").write_text(
        HEAD.replace("id: a", "id: b")
        + "sandbox_tools:\n"
        + TOOL
        + "    capabilities: ['workspace:write:../up']\n"
    )
    result = nexus(env, "agents", "apply", "-f", str(docs))
    assert result.exit_code == ExitCode.INVALID
    assert "nothing was applied" in result.stderr
    lines = [line.strip() for line in result.stderr.splitlines()]
    expected = [
        f"{docs / 'unknown.yaml'}: sandbox_tools.0.capabilities: Value error, unknown"
        " capability 'fs:rm:*'",
        f"{docs / 'escape.yaml'}: sandbox_tools.0.capabilities: Value error, capability"
        " 'workspace:write:../up': a path glob is relative to the workspace",
    ]
    for start in expected:
        assert sum(line.startswith(start) for line in lines) == 1, (start, lines)
