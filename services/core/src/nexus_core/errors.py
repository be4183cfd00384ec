"""The error tree of nexus_core.

CoreError
└── CatalogBackendError   the configured catalog backend cannot be used

A malformed query is a `nexus_events.transport.micro.QueryError` (re-exported here), like every
service's; an invalid agent or skill document is the contract's
`nexus_events.errors.DocumentInvalid`.
"""

from __future__ import annotations

from nexus_events.transport.micro import QueryError

__all__ = ["CatalogBackendError", "CoreError", "QueryError"]


class CoreError(Exception):
    """Root of every error raised by nexus_core."""


class CatalogBackendError(CoreError):
    """The catalog backend named by the configuration is not available."""
