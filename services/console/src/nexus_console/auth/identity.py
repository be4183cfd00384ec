"""A console user: a name, a scope (read or operate) and how they proved it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Scope(StrEnum):
    READ = "read"
    OPERATE = "operate"


class Via(StrEnum):
    TOKEN = "token"  # noqa: S105 - a way of signing in, not a secret; a bearer token from the tokens file, then the session cookie
    PROXY = "proxy"  # the trusted header of an authenticating reverse proxy


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who a request comes from. `principal` is how approvals and audits name them."""

    name: str
    scope: Scope
    via: Via

    @property
    def principal(self) -> str:
        return f"console:{self.name}"

    @property
    def may_operate(self) -> bool:
        return self.scope is Scope.OPERATE
