"""The little of HTTP/1.1 the egress proxy reads: a request head, and its refusals."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from nexus_runner.egress.policy import Scheme

# Headers about this one hop, never passed on (RFC 9110 7.6.1), and the proxy's own.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


class BadRequest(ValueError):  # noqa: N818 - reads as the answer it gets
    """A request head the proxy cannot read: answered 400 with this message."""


@dataclass(frozen=True)
class RequestHead:
    """One request as the client sent it to the proxy."""

    method: str
    scheme: Scheme
    host: str
    port: int
    path: str  # without the query: what path globs are matched on
    target: str  # origin-form, query included: what the destination is asked for
    headers: tuple[tuple[str, str], ...]
    raw: str

    def header(self, name: str) -> str | None:
        found = [v for k, v in self.headers if k.lower() == name]
        return found[-1] if found else None


def _authority(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadRequest(f"CONNECT needs host:port, not {value!r}")
    return host.strip("[]").lower(), int(port)


def parse_head(data: bytes) -> RequestHead:
    """The head up to its blank line (``\\r\\n\\r\\n`` included), or `BadRequest`."""
    raw = data.decode("latin-1")
    lines = raw.split("\r\n")
    try:
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise BadRequest("malformed request line") from None
    if not version.startswith("HTTP/1.") or not method.isalpha():
        raise BadRequest("malformed request line")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(f"malformed header line {line[:80]!r}")
        headers.append((name, value.strip()))
    method = method.upper()
    if method == "CONNECT":
        host, port = _authority(target)
        return RequestHead(method, "https", host, port, "", target, tuple(headers), raw)
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        raise BadRequest("the proxy takes absolute http:// URLs, and CONNECT host:port for https")
    try:
        port = parts.port or 80
    except ValueError:
        raise BadRequest(f"bad port in {target[:200]!r}") from None
    path = parts.path or "/"
    origin = path + (f"?{parts.query}" if parts.query else "")
    return RequestHead(method, "http", parts.hostname, port, path, origin, tuple(headers), raw)


def forwarded_head(head: RequestHead, body_length: int = 0) -> bytes:
    """The request as the destination gets it: origin-form, without hop-by-hop headers, one
    request per connection (the proxy never keeps a destination connection for another), and
    one Content-Length, the body's the proxy read and checked (never the client's repeats)."""
    # Host is the checked URL's, whatever the client wrote: a shared front (a CDN) would
    # otherwise serve another site behind a granted address.
    host = f"[{head.host}]" if ":" in head.host else head.host
    lines = [f"{head.method} {head.target} HTTP/1.1"]
    lines.append(f"Host: {host}" + ("" if head.port == 80 else f":{head.port}"))
    dropped = {*HOP_BY_HOP, "host", "content-length"}
    lines += [f"{k}: {v}" for k, v in head.headers if k.lower() not in dropped]
    if body_length or head.header("content-length") is not None:
        lines.append(f"Content-Length: {body_length}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def refusal(status: int, reason: str) -> bytes:
    """A short answer of the proxy's own, the reason as its one-line body."""
    titles = {400: "Bad Request", 403: "Forbidden", 411: "Length Required"}
    titles |= {413: "Content Too Large"}
    titles |= {502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}
    body = (reason.replace("\r", " ").replace("\n", " ") + "\n").encode()
    return (
        f"HTTP/1.1 {status} {titles.get(status, 'Error')}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nX-Nexus-Egress: refused\r\nConnection: close\r\n\r\n"
    ).encode() + body


def status_of(first: bytes) -> int | None:
    """The status code of a response's first bytes, if they show one."""
    parts = first.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return int(parts[1])
    return None
