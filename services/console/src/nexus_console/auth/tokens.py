"""The console's tokens file, read again whenever it changes, so a removed token ends its
sessions and a new one works without a restart."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from nexus_events.runtime.bearer_tokens import (
    BearerTokens,
    TokenEntry,
    TokensFileError,
    load_entries,
)

from nexus_console.auth.identity import Scope, Via, Viewer

log = logging.getLogger(__name__)

__all__ = ["Match", "TokenBook", "TokensFileError"]


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
            # A bad file at start-up stops the service with its one-line reason.
            self._entries = load_entries(path, TokenEntry)
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
                self._entries = load_entries(self.path, TokenEntry)
            except TokensFileError as exc:
                # Keep the entries known to be good: a half-written file must not log everyone
                # out, nor let anyone in.
                log.warning("%s; keeping the %d tokens read before", exc, len(self._entries))
            self._stamp = stamp
        return self._entries

    def identify(self, token: str) -> Match | None:
        found = BearerTokens(self._fresh()).identify(token)
        if found is None:
            return None
        return Match(Viewer(found.name, Scope(found.scope), Via.TOKEN), _entry_id(found))

    def still_valid(self, entry_id: str) -> bool:
        return any(_entry_id(e) == entry_id for e in self._fresh())
