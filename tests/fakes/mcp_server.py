"""A small stdio MCP server for tests, built on the `mcp` package's own server API.

Run as ``python -m tests.fakes.mcp_server`` (or the file path); the real `mcp` client talks to
it over stdin/stdout. Its tools cover what the runner must handle: a plain result, a tool
error, a call that never returns, a process that dies mid-call, output carrying a secret, and
tools annotated read-only (``lookup``) and destructive (``wipe``).
Every process it starts writes its pid to ``mcp-pids.txt`` in its working directory, so a
test can check none is left after the run.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("nexus-fake")
PID_FILE = "mcp-pids.txt"


def _record_pid(pid: int) -> None:
    with Path(PID_FILE).open("a") as f:
        f.write(f"{pid}\n")


@server.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return f"echo: {text}"


@server.tool(description="Always fails with the given message.")
def fail(message: str = "boom") -> str:
    raise ValueError(message)


@server.tool(description="Never returns; starts a child process that sleeps too.")
async def hang() -> str:
    child = await asyncio.create_subprocess_exec("sleep", "600")
    _record_pid(child.pid)
    await asyncio.sleep(3600)
    return "unreachable"


@server.tool(description="Kills this server process mid-call.")
def crash() -> str:
    sys.stderr.write("fake MCP server: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool(description="Prints the FAKE_MCP_TOKEN secret to stdout (as a result) and stderr.")
def leak() -> str:
    token = os.environ.get("FAKE_MCP_TOKEN", "<unset>")
    sys.stderr.write(f"leaking {token}\n")
    sys.stderr.flush()
    return f"the token is {token}"


@server.tool(
    description="Look a word up (annotated read-only: offered in plan mode).",
    annotations=ToolAnnotations(read_only_hint=True),
)
def lookup(word: str) -> str:
    return f"{word}: a word"


@server.tool(description="The names of the environment variables this server sees.")
def env_names() -> str:
    return ",".join(sorted(os.environ))


@server.tool(
    description="Pretends to delete everything; annotated destructive.",
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
)
def wipe() -> str:
    return "wiped"


def main() -> None:
    _record_pid(os.getpid())
    server.run("stdio")


if __name__ == "__main__":
    main()
