"""Capability tokens of sandboxed tools (docs/sandbox.md): parsed strictly, failing CLOSED.

A token names one thing a tool's JavaScript may ask the host for: ``workspace:read:<glob>``,
``workspace:write:<glob>``, ``events:emit:<name>``, ``memory:read:<scope>``, ``http:<host>``,
``state:read:<key>``, ``state:write:<key>``. Anything else (an unknown kind, a missing or
empty target, a stray colon, an absolute or escaping path glob) is a `CapabilityError`, never
a grant: the definition holding it is refused at `agents apply`.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal[
    "workspace:read",
    "workspace:write",
    "events:emit",
    "memory:read",
    "http",
    "state:read",
    "state:write",
]
KINDS: tuple[Kind, ...] = (
    "workspace:read",
    "workspace:write",
    "events:emit",
    "memory:read",
    "http",
    "state:read",
    "state:write",
)
# Tokens that let a tool change nothing: a tool holding only these is offered in plan mode.
READ_KINDS: frozenset[Kind] = frozenset({"workspace:read", "memory:read", "state:read"})

# Targets are short, printable and without whitespace or colons (a colon would make the
# split ambiguous: `workspace:read:a:b` is refused, not read as target `a:b`).
_TARGET = re.compile(r"[A-Za-z0-9_.*?\[\]/@+=,-]{1,200}")
# A host is a DNS name, optionally with `*.` in front (sub-domains) or `:port` behind.
_HOST = re.compile(
    r"(\*\.)?[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*"
)
_NAME = re.compile(r"(\*|[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*(?:\.\*)?)")


class CapabilityError(ValueError):
    """A token that does not parse: the message names it."""


@dataclass(frozen=True)
class Capability:
    kind: Kind
    target: str
    token: str

    def matches(self, value: str) -> bool:
        """Whether this token grants `value` (a workspace-relative path, a name, a host)."""
        if self.kind == "http":
            host = value.lower()
            if self.target.startswith("*."):
                return host.endswith(self.target[1:].lower())
            return host == self.target.lower()
        if self.target == "*":
            return True
        return fnmatch.fnmatchcase(value, self.target)

    @property
    def read_only(self) -> bool:
        return self.kind in READ_KINDS


def _target(token: str, kind: Kind, target: str) -> str:
    if kind == "http":
        if _HOST.fullmatch(target) is None:
            raise CapabilityError(f"capability {token!r}: {target!r} is not a host name")
        return target
    if _TARGET.fullmatch(target) is None:
        raise CapabilityError(f"capability {token!r}: empty or malformed target {target!r}")
    if kind.startswith("workspace:"):
        parts = target.split("/")
        if target.startswith("/") or ".." in parts:
            raise CapabilityError(
                f"capability {token!r}: a path glob is relative to the workspace and stays in it"
            )
    elif kind == "events:emit" and _NAME.fullmatch(target) is None:
        raise CapabilityError(f"capability {token!r}: {target!r} is not an event name")
    return target


def parse(token: str) -> Capability:
    """One token, or `CapabilityError` naming it."""
    if not isinstance(token, str) or not token or token != token.strip():
        raise CapabilityError(f"capability {token!r}: malformed")
    for kind in KINDS:
        prefix = f"{kind}:"
        if token.startswith(prefix):
            return Capability(kind, _target(token, kind, token[len(prefix) :]), token)
    raise CapabilityError(
        f"unknown capability {token!r}: use one of "
        + ", ".join(f"{k}:<{'host' if k == 'http' else 'target'}>" for k in KINDS)
    )


def parse_all(tokens: list[str]) -> tuple[Capability, ...]:
    return tuple(parse(t) for t in tokens)


@dataclass(frozen=True)
class Grants:
    """The tokens of one tool, asked at every host call."""

    capabilities: tuple[Capability, ...]

    @classmethod
    def of(cls, tokens: list[str]) -> Grants:
        return cls(parse_all(tokens))

    def allows(self, kind: Kind, value: str) -> bool:
        return any(c.kind == kind and c.matches(value) for c in self.capabilities)

    @property
    def read_only(self) -> bool:
        return all(c.read_only for c in self.capabilities)
