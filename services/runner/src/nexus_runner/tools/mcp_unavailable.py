"""Why an MCP server could not start, in words for the model, the run's log and its timeline.

Kept apart from how a server is started (`mcp.McpServer.start`, the stdio transport) so that
a different start (a sandboxed spawn) reports its failures through the same function.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from nexus_events.events.runs import McpServerUnavailable, McpUnavailableReason

# Characters of the stderr line quoted (a server may print a whole page on one line).
_STDERR_LINE = 200
# What an exec wrapper (bwrap, env, a shell) prints when the command is not there for it.
_NOT_FOUND = re.compile(
    r"execvp?\b.*No such file or directory|: not found$|command not found", re.IGNORECASE
)


@dataclass(frozen=True)
class ServerUnavailable:
    """One server that is not available to the run: its name, the reason code, one line."""

    server: str
    reason: McpUnavailableReason
    detail: str
    exit_code: int | None = None

    def note(self) -> str:
        """What the model and the run's log read."""
        return (
            f"MCP server {self.server} is unavailable ({self.detail}); its tools cannot be"
            " called in this run."
        )

    def event(self) -> McpServerUnavailable:
        return McpServerUnavailable(
            server=self.server, reason=self.reason, detail=self.detail, exit_code=self.exit_code
        )


def first_stderr_line(path: Path) -> str:
    """The first non-empty line the server wrote to stderr (cut), or ""."""
    try:
        with path.open(errors="replace") as f:
            for line in f:
                if line.strip():
                    return line.strip()[:_STDERR_LINE]
    except OSError:
        return ""
    return ""


def missing_secrets(server: str, names: list[str]) -> ServerUnavailable:
    return ServerUnavailable(server, "missing_secret", "unknown secret(s) " + ", ".join(names))


def start_failure(
    server: str,
    command: str | None,
    error: BaseException | None,
    *,
    exit_code: int | None,
    stderr: str,
    timeout: float | None = None,
) -> ServerUnavailable:
    """Classify a failed start. `error`: what the start raised (None: it timed out after
    `timeout` seconds); `exit_code`: the process's, if it exited on its own (a negative code,
    a signal, is our own kill); `stderr`: the first line it wrote there."""
    said = f"; stderr: {stderr}" if stderr else ""
    if isinstance(error, FileNotFoundError | PermissionError) or _NOT_FOUND.search(stderr):
        hint = "not on the run's PATH, or hidden from its sandbox"
        return ServerUnavailable(
            server, "command_not_found", f"command {command!r} not found: {hint}{said}"
        )
    if exit_code is not None and exit_code >= 0:
        return ServerUnavailable(
            server, "exited", f"exited with code {exit_code} before the handshake{said}", exit_code
        )
    if error is None:
        wait = f" within {timeout:g}s" if timeout is not None else ""
        return ServerUnavailable(
            server, "handshake_timeout", f"did not answer the handshake{wait}{said}"
        )
    from mcp import MCPError  # a server failed: the client is loaded (tools.mcp.import_mcp_client)

    text = error.message if isinstance(error, MCPError) else str(error) or type(error).__name__
    return ServerUnavailable(server, "failed", f"{' '.join(text.split())}{said}")
