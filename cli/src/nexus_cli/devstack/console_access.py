"""The dev stack's console: its port, and a tokens file holding one operate token for the
person who started the stack, so `nexus dev up` can say where to sign in at once."""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

import yaml
from nexus_events.runtime.bearer_tokens import CONSOLE_TOKEN_PREFIX, new_token

from nexus_cli.client import whoami
from nexus_cli.devstack import probes

# The console's documented port (deploy/, docs/console.md); a stack takes it when it is free.
DEFAULT_PORT = 8088
TOKENS_FILE = "console-tokens.yaml"
TOKEN_FILE = "console-token"  # noqa: S105 - a file name, not a secret


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def console_port(env: dict[str, str]) -> str:
    """The port someone set, else 8088 when free, else another free one: two stacks on one
    machine (the test suite's) never fight over it, and the stack knows which it is."""
    if env.get("NEXUS_CONSOLE_PORT"):
        return env["NEXUS_CONSOLE_PORT"]
    return str(DEFAULT_PORT if _free(DEFAULT_PORT) else probes.free_port())


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def ensure_tokens(home: Path) -> tuple[Path, Path]:
    """The stack's tokens file and the file holding its operate token (both 0600), made on
    the first `up` of this home and kept after (a token someone added stays)."""
    tokens, token = home / TOKENS_FILE, home / TOKEN_FILE
    if not tokens.exists() or not token.exists():
        name = "".join(c if c.isalnum() or c in "_.@-" else "-" for c in whoami())[:64] or "dev"
        value, sha256 = new_token(CONSOLE_TOKEN_PREFIX)
        entry = {"name": name, "sha256": sha256, "scope": "operate"}
        _write_private(tokens, yaml.safe_dump({"tokens": [entry]}, sort_keys=False))
        _write_private(token, value + "\n")
    return tokens, token


def console_env(home: Path, env: dict[str, str]) -> dict[str, str]:
    """The console process's own settings in the dev stack."""
    tokens, _ = ensure_tokens(home)
    return {
        "NEXUS_CONSOLE_HOST": "127.0.0.1",
        "NEXUS_CONSOLE_PORT": console_port(env),
        "NEXUS_CONSOLE_TOKENS_FILE": env.get("NEXUS_CONSOLE_TOKENS_FILE") or str(tokens),
        # One key per `up`: sessions end when the stack restarts, as a browser expects of a
        # local tool; set it to keep them.
        "NEXUS_CONSOLE_SESSION_SECRET": env.get("NEXUS_CONSOLE_SESSION_SECRET")
        or secrets.token_urlsafe(32),
    }
