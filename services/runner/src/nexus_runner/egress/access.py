"""How the tools' sandbox reaches the run's egress proxy: its socket, a relay, the proxy env.

The proxy listens on ``<net_dir>/egress.sock`` outside the tools' sandbox. The sandbox binds
``net_dir`` in (read-only is enough to connect), wraps each command in `relay_argv`, which
runs ``nexus_events.runtime.netrelay inner`` (stdlib only) listening on ``127.0.0.1:<port>`` in the
sandbox's own network namespace and passing each connection to that socket, and sets `env`
so HTTP clients (pip, uv, curl, requests, httpx) send their requests to it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from nexus_events.runtime import netrelay

RELAY_SCRIPT = Path(netrelay.__file__)
# netrelay names a route's socket `<route>.sock` in the net dir.
ROUTE = "egress"
SOCKET_NAME = f"{ROUTE}.sock"
# The proxy's port inside the tools' sandbox (its own network namespace: nothing else there).
DEFAULT_PORT = 3128


@dataclass(frozen=True)
class EgressAccess:
    """The run's egress proxy, as the tools' sandbox plugs it in."""

    net_dir: Path
    port: int = DEFAULT_PORT

    @property
    def socket_path(self) -> Path:
        return self.net_dir / SOCKET_NAME

    def relay_argv(self, net_dir: str | None = None, python: str = sys.executable) -> list[str]:
        """The prefix of a command in the sandbox: ``[*relay_argv(), *command]`` runs the
        command with the relay beside it, and exits as the command does. `net_dir`: where
        the sandbox binds `net_dir` (default: the same path)."""
        inside = net_dir or str(self.net_dir)
        return [
            python, "-I", "-S", str(RELAY_SCRIPT), "inner", inside,
            f"{ROUTE}=127.0.0.1:{self.port}", "--",
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        """The environment that sends the tools' HTTP clients through the relay; loopback
        stays direct (the sandbox's own, e.g. a test server its tests start)."""
        url = f"http://127.0.0.1:{self.port}"
        no_proxy = "localhost,127.0.0.1,::1"
        return {
            "HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
            "NO_PROXY": no_proxy, "no_proxy": no_proxy,
        }  # fmt: skip
