"""A free TCP port to listen on that no outgoing connection will take before it is used.

`bind(("127.0.0.1", 0))` hands out a port from the kernel's ephemeral range, the same range
every outgoing connection (a service's NATS or PostgreSQL client) takes its source port from:
between picking such a port and a child process listening on it, a connection of any process
may take it (a dev stack's flows once failed to start with "address already in use" that way).
Ports below the ephemeral range are never given to outgoing connections or to `bind(0)`, so
only another deliberate pick could collide; a random one, checked free, makes that unlikely.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Linux's default ephemeral range starts here; read from /proc where it can be.
_DEFAULT_EPHEMERAL_LOW = 32768
_LOWEST = 10000  # below: well-known and registered services' ports
_TRIES = 64


def _ephemeral_low() -> int:
    try:
        low, _ = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low)
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL_LOW


def _bindable(port: int, host: str) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port on `host` nothing listens on, outside the ephemeral range when it leaves room
    (else whatever `bind(0)` gives)."""
    high = _ephemeral_low() - 1
    if high - _LOWEST >= 1000:
        for _ in range(_TRIES):
            port = random.randint(_LOWEST, high)  # noqa: S311 - a port, not a secret
            if _bindable(port, host):
                return port
    with socket.socket() as s:
        s.bind((host, 0))
        chosen: int = s.getsockname()[1]
        return chosen


__all__ = ["free_port"]
