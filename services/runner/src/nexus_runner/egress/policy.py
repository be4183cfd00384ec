"""Whether a request of the tools may leave: the agent's egress grants, then its destination.

Pure decisions, no I/O: `decide` reads the request against the grants (host and port always;
method and path only for plain ``http://``, which the proxy can read); `check_destination`
reads the addresses the runner resolved the host to (private and loopback ones need a grant
naming the host exactly; the runner's own endpoints are never reachable).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from nexus_events.events import EgressGrant

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Scheme = Literal["http", "https"]


@dataclass(frozen=True)
class Verdict:
    """Allowed (by `grant`) or refused (`reason` is the one line the client and event get)."""

    allowed: bool
    reason: str
    grant: EgressGrant | None = None


def describe(grant: EgressGrant) -> str:
    """A grant as one short phrase, for events: ``*.pypi.org:443 GET /simple/*``."""
    text = grant.host if grant.port is None else f"{grant.host}:{grant.port}"
    if grant.methods is not None:
        text += " " + ",".join(grant.methods)
    if grant.paths is not None:
        text += " " + ",".join(grant.paths)
    return f"grant {text}"


def decide(  # noqa: PLR0917 - the request's fields, in the order a request line has them
    grants: Sequence[EgressGrant], scheme: Scheme, host: str, port: int, method: str, path: str
) -> Verdict:
    """The verdict of the grants on one request (``https``: a CONNECT, method and path unseen)."""
    where = f"{host}:{port}"
    candidates = [g for g in grants if g.matches_host(host) and g.matches_port(port, scheme)]
    if not candidates:
        return Verdict(False, f"no egress grant for {where}")
    if scheme == "https":
        plain = [g for g in candidates if not g.checks_request]
        if not plain:
            return Verdict(
                False,
                f"https to {where} with method/path rules cannot be checked (they are inside"
                " TLS); grant the host without them",
            )
        return Verdict(True, describe(plain[0]), plain[0])
    fitting = [g for g in candidates if g.matches_request(method, path)]
    if not fitting:
        return Verdict(False, f"{method} {path} on {where} is outside its egress grant")
    return Verdict(True, describe(fitting[0]), fitting[0])


def _plain(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # ::ffff:127.0.0.1 is loopback too
    return address


@dataclass(frozen=True)
class Reserved:
    """The runner's own endpoints (the model, NATS): never a destination of the tools."""

    endpoints: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, int]]) -> Reserved:
        """From (host name or address, port) pairs; add the addresses the names resolve to."""
        return cls(frozenset((h.lower().strip("[]"), p) for h, p in pairs))

    def holds(self, host: str, port: int) -> bool:
        return (host.lower().strip("[]"), port) in self.endpoints


def check_destination(
    grant: EgressGrant, host: str, port: int, addresses: Sequence[Address], reserved: Reserved
) -> str | None:
    """Why the resolved destination is refused, or None. Every address is checked, and the
    runner connects to one of these, never resolving again (no rebinding in between)."""
    if reserved.holds(host, port) or any(reserved.holds(str(_plain(a)), port) for a in addresses):
        return f"{host}:{port} is the runner's own endpoint (model, NATS): never the tools'"
    if not addresses:
        return f"{host} resolves to no address"
    for address in map(_plain, addresses):
        if not address.is_global and grant.wildcard:
            return (
                f"{host} resolves to the non-public address {address}: only a grant naming"
                " the host exactly reaches it"
            )
    return None
