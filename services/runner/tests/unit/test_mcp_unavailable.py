"""How a failed MCP server start is classified and worded (no process needed)."""

from __future__ import annotations

from pathlib import Path

from mcp import MCPError

from nexus_runner.tools.mcp_unavailable import first_stderr_line, missing_secrets, start_failure


def test_a_command_missing_for_an_exec_wrapper_is_command_not_found() -> None:
    # What bwrap prints when the command is hidden from the sandbox; it then exits 1.
    stderr = "bwrap: execvp mcp-github: No such file or directory"
    why = start_failure("github", "mcp-github", None, exit_code=1, stderr=stderr)
    assert why.reason == "command_not_found"
    assert why.detail.startswith("command 'mcp-github' not found")
    assert stderr in why.detail


def test_a_missing_executable_is_command_not_found() -> None:
    error = FileNotFoundError(2, "No such file or directory")
    why = start_failure("gh", "/opt/gh", error, exit_code=None, stderr="")
    assert (why.reason, why.exit_code) == ("command_not_found", None)


def test_exit_codes_timeouts_and_the_rest() -> None:
    exited = start_failure("a", "a", MCPError(-32000, "Connection closed"), exit_code=3, stderr="x")
    assert (exited.reason, exited.exit_code) == ("exited", 3)
    assert exited.detail == "exited with code 3 before the handshake; stderr: x"
    # Killed by our own stop after the timeout (a signal: negative): the handshake timed out.
    slow = start_failure("a", "a", None, exit_code=-15, stderr="", timeout=2.5)
    assert (slow.reason, slow.detail) == (
        "handshake_timeout",
        "did not answer the handshake within 2.5s",
    )
    other = start_failure("a", "a", MCPError(-32603, "bad\nframe"), exit_code=None, stderr="")
    assert (other.reason, other.detail) == ("failed", "bad frame")
    secret = missing_secrets("a", ["k1", "k2"])
    assert (secret.reason, secret.detail) == ("missing_secret", "unknown secret(s) k1, k2")
    assert secret.event().model_dump()["server"] == "a"
    assert "MCP server a is unavailable (unknown secret(s) k1, k2)" in secret.note()


def test_the_first_stderr_line_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "err"
    path.write_text("\n\n" + "e" * 500 + "\nsecond\n")
    assert first_stderr_line(path) == "e" * 200
    assert first_stderr_line(tmp_path / "missing") == ""
