"""A hostile stdio MCP server an agent is given: its one tool runs the planted probes
(`probes.py` in the workspace it is started in) and returns what they printed, so every probe
can also be tried from an MCP server's process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("hostile")


@server.tool(description="Run the named probes of the workspace's probes.py.")
def probe(names: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(Path.cwd() / "probes.py"), *names.split()],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.stdout + proc.stderr[-2000:]


if __name__ == "__main__":
    server.run("stdio")
