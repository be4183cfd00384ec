"""The error tree of nexus_core.

CoreError
├── DocumentInvalid       an agent/skill document failed validation (field by field)
├── CatalogBackendError   the configured catalog backend cannot be used
└── QueryError            a query request is malformed or names nothing (reply code)
"""

from __future__ import annotations

from dataclasses import dataclass


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


class QueryError(CoreError):
    """A query cannot be answered: `code` is the reply's error code (400, 404); `fields` lists
    the bad fields of a 400 as ``{"loc", "msg"}`` objects."""

    def __init__(self, code: int, message: str, fields: list[dict[str, str]] | None = None) -> None:
        self.code = code
        self.fields = fields or []
        super().__init__(message)
