"""The error tree of nexus_core.

CoreError
├── DocumentInvalid       an agent/skill document failed validation (field by field)
└── CatalogBackendError   the configured catalog backend cannot be used

A malformed query is a `nexus_events.micro.QueryError` (re-exported here), like every service's.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexus_events.micro import QueryError

__all__ = ["CatalogBackendError", "CoreError", "DocumentInvalid", "FieldError", "QueryError"]


class CoreError(Exception):
    """Root of every error raised by nexus_core."""


@dataclass(frozen=True)
class FieldError:
    """One problem in a document: where (dotted path, ``(document)`` for the whole) and what."""

    loc: str
    msg: str

    def __str__(self) -> str:
        return f"{self.loc}: {self.msg}"


class DocumentInvalid(CoreError, ValueError):  # noqa: N818 - reads as a fact
    """A catalog document does not validate; `errors` lists every bad field. Nothing is sent."""

    def __init__(self, kind: str, errors: list[FieldError]) -> None:
        self.kind = kind
        self.errors = errors
        super().__init__(f"invalid {kind}: " + "; ".join(str(e) for e in errors))


class CatalogBackendError(CoreError):
    """The catalog backend named by the configuration is not available."""
