"""Egress grants (where an agent's tools may reach on the network) and the `egress` run event.

An agent's tools have no network of their own (docs/sandbox.md, "Egress grants"): each
request goes through a proxy the runner controls, which allows it only if a grant of the
agent names its host and port (and, for plain ``http://``, its method and path), and records
every request, allowed or refused, as an `egress` run event. Grants are written by operators
and fail closed: a grant that does not parse refuses the whole definition at apply.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.subjects import Family
from nexus_events.events.base import Event, register
from nexus_events.events.specs import Spec

# A DNS name, optionally with `*.` in front (any sub-domain, not the name itself).
_HOST = re.compile(
    r"(\*\.)?[a-z0-9](?:[a-z0-9-]{0,62})(?:\.[a-z0-9](?:[a-z0-9-]{0,62}))*", re.IGNORECASE
)
# Methods a grant may name (RFC 9110 plus PATCH); CONNECT is the proxy's own, never granted.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# A path glob: absolute, printable, no whitespace (matched with fnmatch on the path alone).
_PATH = re.compile(r"/[!-~]{0,511}")
# The port of a grant that names none: the scheme's usual one.
DEFAULT_PORTS = {"http": 80, "https": 443}


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


class EgressGrant(Spec):
    """One place an agent's tools may reach: a host (and port, methods, path globs)."""

    host: str = Field(
        ...,
        description="Exact host name, '*.example.com' (its sub-domains, not example.com itself)"
        " or an IP address. Private and loopback addresses are reached only through a grant"
        " naming the host exactly (never a wildcard); the model's and NATS' never.",
    )
    port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="Port; None = 80 for http:// requests and 443 for https (CONNECT).",
    )
    methods: list[str] | None = Field(
        None,
        description="HTTP methods allowed (GET, POST, ...); None = all. Checked on http://"
        " only: an https grant cannot carry it (the method is inside TLS).",
    )
    paths: list[str] | None = Field(
        None,
        description="Path globs ('/simple/*'), matched on the path without its query; None ="
        " all. Checked on http:// only, like methods.",
    )

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if _ip(value) is not None:
            return str(_ip(value))
        if _HOST.fullmatch(value) is None or len(value) > 253:
            raise ValueError(
                f"egress grant host {value!r} is not a host name, '*.<domain>' or an IP address"
            )
        return value.lower()

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("egress grant methods: an empty list allows nothing; omit it for all")
        upper = [m.upper() for m in value]
        unknown = [m for m, u in zip(value, upper, strict=True) if u not in METHODS]
        if unknown:
            raise ValueError(
                f"egress grant methods {unknown!r}: use any of {', '.join(sorted(METHODS))}"
            )
        return upper

    @field_validator("paths")
    @classmethod
    def _paths(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("egress grant paths: an empty list allows nothing; omit it for all")
        bad = [p for p in value if _PATH.fullmatch(p) is None]
        if bad:
            raise ValueError(
                f"egress grant paths {bad!r}: a path glob starts with '/' and has no spaces"
            )
        return value

    @property
    def wildcard(self) -> bool:
        return self.host.startswith("*.")

    @property
    def checks_request(self) -> bool:
        """Whether it restricts methods or paths (which only plain http:// can show)."""
        return self.methods is not None or self.paths is not None

    def matches_host(self, host: str) -> bool:
        name = host.lower().rstrip(".")
        address = _ip(name)
        if address is not None:
            return not self.wildcard and _ip(self.host) == address
        if self.wildcard:
            return name.endswith(self.host[1:])
        return name == self.host

    def matches_port(self, port: int, scheme: Literal["http", "https"]) -> bool:
        return port == (self.port if self.port is not None else DEFAULT_PORTS[scheme])

    def matches_request(self, method: str, path: str) -> bool:
        if self.methods is not None and method.upper() not in self.methods:
            return False
        return self.paths is None or any(fnmatch.fnmatchcase(path, g) for g in self.paths)


def unique_grants(grants: list[EgressGrant]) -> list[EgressGrant]:
    """`grants` without repeats, in order (an agent's and its skills' may overlap)."""
    seen: list[EgressGrant] = []
    for grant in grants:
        if grant not in seen:
            seen.append(grant)
    return seen


@register
class RunEgress(Event):
    """A network request of the run's tools, allowed or refused (one per request or tunnel)."""

    event_family: ClassVar[Family] = Family.RUN
    event_name: ClassVar[str] = RunEvent.EGRESS

    via: Literal["proxy", "sandbox"] = Field(
        ...,
        description="proxy: the tools' proxy (shell, tests, MCP servers); sandbox: a"
        " sandboxed JavaScript tool's nexus.http.fetch.",
    )
    tool: str | None = Field(None, description="The sandboxed tool that asked (via sandbox).")
    scheme: Literal["http", "https"] = Field(
        ..., description="http: a plain request, checked whole; https: a CONNECT tunnel."
    )
    host: str = Field(..., description="Destination host as asked.")
    port: int = Field(..., ge=0, le=65535, description="Destination port.")
    method: str = Field(..., description="HTTP method; CONNECT for an https tunnel.")
    path: str | None = Field(
        None,
        description="Path (query cut) of a plain http request or a sandboxed fetch; None for"
        " a CONNECT tunnel (the path is inside TLS).",
    )
    allowed: bool = Field(..., description="Whether the request went out.")
    reason: str = Field("", description="Why it was refused, or the grant that allowed it.")
    status: int | None = Field(
        None, description="Response status (the proxy's 403 when refused); None for a tunnel."
    )
    bytes_up: int = Field(0, ge=0, description="Bytes sent to the destination.")
    bytes_down: int = Field(0, ge=0, description="Bytes received from the destination.")
    duration_ms: int = Field(0, ge=0, description="From the request to the end of the reply.")
