"""Who calls: bearer tokens (stored as sha256 digests), their scope and NATS identity.

The tokens file (YAML, NEXUS_MCP_TOKENS_FILE) never holds a token, only its digest; tokens are
read and compared by `nexus_events.runtime.bearer_tokens`, as the console's are.
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from nexus_events.runtime import bearer_tokens
from nexus_events.runtime.bearer_tokens import BearerTokens, TokensFileError, load_entries
from pydantic import Field

from nexus_cli.errors import CliError, ExitCode

Scope = bearer_tokens.Scope


# An agent id ([A-Za-z0-9_-]) or a glob of them (`review*`, `team-?-planner`).
AgentPattern = Annotated[str, Field(pattern=r"^[A-Za-z0-9_*?-]{1,128}$")]


class TokenEntry(bearer_tokens.TokenEntry):
    # None (left out): every agent. Otherwise the agents (ids or globs) whose runs, approvals
    # and memories the token sees and acts on; the rest is "not found" to it.
    agents: list[AgentPattern] | None = Field(None, min_length=1)
    nats_user: str | None = None
    nats_password_env: str | None = None


@dataclass(frozen=True)
class Identity:
    """One caller: `name` (logs, ``requested_by``), its scope, the NATS user it acts as
    (None: the server's own connection) and the agents it sees (None: all)."""

    name: str
    scope: Scope
    requested_by: str
    nats_user: str | None = None
    nats_password: str | None = None
    agents: tuple[str, ...] | None = None

    def may(self, needs: Scope) -> bool:
        return needs is Scope.READ or self.scope is Scope.OPERATE

    @property
    def scoped(self) -> bool:
        """Whether the caller sees only some agents."""
        return self.agents is not None

    def sees(self, agent_id: str | None) -> bool:
        """Whether runs of `agent_id` are visible to the caller (an unknown agent: only to an
        unscoped caller)."""
        if self.agents is None:
            return True
        if not agent_id:
            return False
        return any(fnmatch.fnmatchcase(agent_id, pattern) for pattern in self.agents)


def load_tokens(path: Path) -> list[TokenEntry]:
    """The entries of a tokens file; a one-line CliError (exit 2) if it is unreadable or bad."""
    try:
        entries = load_entries(path, TokenEntry)
    except TokensFileError as exc:
        raise CliError(str(exc)) from None
    for e in entries:
        if e.nats_user and e.nats_password_env and e.nats_password_env not in os.environ:
            raise CliError(
                f"tokens file {path}: token {e.name}: {e.nats_password_env} is not set",
                code=ExitCode.INVALID,
            )
    return entries


class Tokens:
    """Resolve a presented bearer token to an Identity."""

    def __init__(self, entries: list[TokenEntry]) -> None:
        self._tokens = BearerTokens(entries)

    def __len__(self) -> int:
        return len(self._tokens)

    def identify(self, token: str) -> Identity | None:
        return self._identity(self._tokens.identify(token))

    def from_header(self, value: str | None) -> Identity | None:
        return self._identity(self._tokens.from_header(value))

    @staticmethod
    def _identity(found: TokenEntry | None) -> Identity | None:
        if found is None:
            return None
        password = os.environ.get(found.nats_password_env) if found.nats_password_env else None
        return Identity(
            name=found.name,
            scope=found.scope,
            requested_by=f"mcp:{found.name}",
            nats_user=found.nats_user,
            nats_password=password,
            agents=None if found.agents is None else tuple(found.agents),
        )


def new_token(
    name: str, scope: Literal["read", "operate"], agents: list[str] | None = None
) -> tuple[str, str]:
    """A fresh random token and the YAML entry (its digest, its agents if any) to add to the
    tokens file; a pydantic ValidationError for a bad name or agent pattern."""
    token, sha256 = bearer_tokens.new_token("nxm_")
    entry: dict[str, Any] = {"name": name, "sha256": sha256, "scope": scope}
    if agents is not None:
        entry["agents"] = agents
    TokenEntry.model_validate(entry)
    text = yaml.safe_dump({"tokens": [entry]}, sort_keys=False)
    return token, text


def unauthorized_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()
