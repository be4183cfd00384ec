"""The console's tokens file, read again whenever it changes, so a removed token ends its
sessions and a new one works without a restart."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus_console.auth.identity import Scope, Via, Viewer

log = logging.getLogger(__name__)


class TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.@-]{1,64}$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    scope: Scope


class TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[TokenEntry] = Field(default_factory=list)


class TokensFileError(ValueError):
    """The tokens file cannot be used (one line: which file, what is wrong)."""


def load_entries(path: Path) -> list[TokenEntry]:
    try:
        raw: Any = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TokensFileError(f"cannot read tokens file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        why = " ".join(str(exc).split())
        raise TokensFileError(f"tokens file {path} is not YAML: {why}") from None
    try:
        entries = TokensFile.model_validate(raw or {}).tokens
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TokensFileError(f"tokens file {path}: {where}: {first['msg']}") from None
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise TokensFileError(f"tokens file {path}: token names must be unique")
    return entries


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Match:
    viewer: Viewer
    entry: str  # name:digest-prefix, kept in the session


def _entry_id(entry: TokenEntry) -> str:
    return f"{entry.name}:{entry.sha256[:16]}"


class TokenBook:
    """Bearer tokens by digest. `path` None: no token logs in."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: list[TokenEntry] = []
        self._stamp: tuple[int, int] | None = None
        if path is not None:
            self._entries = load_entries(path)  # a bad file at start-up stops the service
            self._stamp = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _fresh(self) -> list[TokenEntry]:
        stamp = self._stat()
        if stamp != self._stamp and self.path is not None:
            try:
                self._entries = load_entries(self.path)
            except TokensFileError as exc:
                # Keep the entries known to be good: a half-written file must not log everyone
                # out, nor let anyone in.
                log.warning("%s; keeping the %d tokens read before", exc, len(self._entries))
            self._stamp = stamp
        return self._entries

    def identify(self, token: str) -> Match | None:
        presented = digest(token).encode()
        found: TokenEntry | None = None
        for entry in self._fresh():
            # Every entry is compared: the time taken says nothing about which matched.
            if hmac.compare_digest(presented, entry.sha256.encode()):
                found = entry
        if found is None:
            return None
        return Match(Viewer(found.name, found.scope, Via.TOKEN), _entry_id(found))

    def still_valid(self, entry_id: str) -> bool:
        return any(_entry_id(e) == entry_id for e in self._fresh())
