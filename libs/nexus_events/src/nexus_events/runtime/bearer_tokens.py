"""Bearer tokens stored as sha256 digests in a YAML file, and who presented one.

A tokens file never holds a token, only its digest; a presented token is hashed and compared
with every entry in constant time, so neither a match nor its position leaks through timing.
Used by the MCP server (prefix ``nxm_``) and the console (``nxc_``, NEXUS_CONSOLE_TOKENS_FILE).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

CONSOLE_TOKENS_ENV = "NEXUS_CONSOLE_TOKENS_FILE"
CONSOLE_TOKEN_PREFIX = "nxc_"  # noqa: S105 - a prefix, not a secret


class TokensFileError(ValueError):
    """A tokens file that cannot be used; its message is one line naming the file."""


class Scope(StrEnum):
    READ = "read"
    OPERATE = "operate"


class TokenEntry(BaseModel):
    """One token: its holder's name, the digest of the token, what it may do."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.@-]{1,64}$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    scope: Scope


EntryT = TypeVar("EntryT", bound=TokenEntry)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(prefix: str) -> tuple[str, str]:
    """A fresh random token and its digest (the only thing to store)."""
    token = f"{prefix}{secrets.token_urlsafe(32)}"
    return token, digest(token)


def load_entries(path: Path, entry_type: type[EntryT]) -> list[EntryT]:
    """The entries of a tokens file (`tokens: [...]`); TokensFileError if unreadable or bad."""
    import yaml  # the `yaml` extra: only callers that read tokens files need it

    try:
        raw: Any = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TokensFileError(f"cannot read tokens file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        flat = " ".join(str(exc).split())
        raise TokensFileError(f"tokens file {path} is not YAML: {flat}") from None
    raw = raw or {}
    if not isinstance(raw, dict) or set(raw) - {"tokens"}:
        raise TokensFileError(f"tokens file {path}: expected a mapping with only `tokens`")
    items = raw.get("tokens") or []
    if not isinstance(items, list):
        raise TokensFileError(f"tokens file {path}: tokens: expected a list")
    entries: list[EntryT] = []
    for i, item in enumerate(items):
        try:
            entries.append(entry_type.model_validate(item))
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in ("tokens", i, *first["loc"]))
            raise TokensFileError(f"tokens file {path}: {where}: {first['msg']}") from None
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise TokensFileError(f"tokens file {path}: token names must be unique")
    return entries


class BearerTokens(Generic[EntryT]):
    """Resolve a presented bearer token to its entry."""

    def __init__(self, entries: list[EntryT]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def identify(self, token: str) -> EntryT | None:
        presented = digest(token).encode()
        found: EntryT | None = None
        for entry in self._entries:
            # Every entry is compared, match or not: the time taken says nothing about which.
            if hmac.compare_digest(presented, entry.sha256.encode()):
                found = entry
        return found

    def from_header(self, value: str | None) -> EntryT | None:
        """The entry for an `Authorization: Bearer <token>` header value, else None."""
        if not value:
            return None
        kind, _, token = value.partition(" ")
        if kind.lower() != "bearer" or not token.strip():
            return None
        return self.identify(token.strip())
