"""The egress verdicts without sockets: grants read against a request, then its addresses."""

from __future__ import annotations

import ipaddress

import pytest
from nexus_events.events import EgressGrant

from nexus_runner.egress import Reserved, check_destination, decide
from nexus_runner.egress.http1 import BadRequest, forwarded_head, parse_head

PYPI = EgressGrant(host="pypi.org", methods=["GET"], paths=["/simple/*"])
FILES = EgressGrant(host="*.pythonhosted.org")
API = EgressGrant(host="api.example.com", port=8443)


def test_http_is_checked_on_host_port_method_and_path() -> None:
    grants = [PYPI, FILES, API]
    assert decide(grants, "http", "pypi.org", 80, "GET", "/simple/x/").allowed
    assert decide(grants, "http", "pypi.org", 80, "POST", "/simple/x/").reason == (
        "POST /simple/x/ on pypi.org:80 is outside its egress grant"
    )
    assert not decide(grants, "http", "pypi.org", 80, "GET", "/admin").allowed
    assert not decide(grants, "http", "pypi.org", 8080, "GET", "/simple/").allowed
    assert decide(grants, "http", "files.pythonhosted.org", 80, "PUT", "/any").allowed
    assert decide(grants, "http", "evil.org", 80, "GET", "/").reason == (
        "no egress grant for evil.org:80"
    )
    allowed = decide(grants, "http", "api.example.com", 8443, "DELETE", "/x")
    assert (allowed.allowed, allowed.grant, allowed.reason) == (
        True,
        API,
        "grant api.example.com:8443",
    )


def test_https_is_checked_on_host_and_port_and_never_through_a_grant_with_rules() -> None:
    grants = [PYPI, FILES, API]
    assert decide(grants, "https", "files.pythonhosted.org", 443, "CONNECT", "").allowed
    assert decide(grants, "https", "api.example.com", 8443, "CONNECT", "").allowed
    assert not decide(grants, "https", "api.example.com", 443, "CONNECT", "").allowed
    ruled = decide(grants, "https", "pypi.org", 443, "CONNECT", "")
    assert not ruled.allowed
    assert "cannot be checked" in ruled.reason
    assert "grant the host without them" in ruled.reason
    # The same host granted once more without rules opens the tunnel.
    assert decide([*grants, EgressGrant(host="pypi.org")], "https", "pypi.org", 443, "CONNECT", "")


def _ips(*values: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return [ipaddress.ip_address(v) for v in values]


def test_non_public_addresses_need_an_exact_grant_and_the_runners_own_are_never_reached() -> None:
    wild = EgressGrant(host="*.corp.example")
    exact = EgressGrant(host="pkgs.corp.example")
    none = Reserved()
    for private in ("10.0.0.5", "127.0.0.1", "169.254.169.254", "::1", "::ffff:192.168.1.1"):
        why = check_destination(wild, "a.corp.example", 443, _ips(private), none)
        assert why is not None
        assert "non-public address" in why
        assert check_destination(exact, "pkgs.corp.example", 443, _ips(private), none) is None
    # One private address among public ones is enough to refuse (any could be dialled).
    assert check_destination(wild, "a.corp.example", 443, _ips("8.8.8.8", "10.1.1.1"), none)
    assert check_destination(wild, "a.corp.example", 443, _ips("8.8.8.8"), none) is None
    assert check_destination(wild, "a.corp.example", 443, [], none) is not None
    reserved = Reserved.of([("llm.internal", 8000), ("10.0.0.9", 4222)])
    model = check_destination(exact, "llm.internal", 8000, _ips("10.0.0.8"), reserved)
    assert model is not None
    assert "runner's own endpoint" in model
    assert check_destination(exact, "pkgs.corp.example", 4222, _ips("10.0.0.9"), reserved)
    assert check_destination(exact, "pkgs.corp.example", 4223, _ips("10.0.0.9"), reserved) is None


def test_request_heads_parse_strictly_and_go_on_without_hop_headers() -> None:
    head = parse_head(
        b"POST http://pypi.org/simple/x?q=1 HTTP/1.1\r\nHost: evil.org\r\nContent-Length: 3\r\n"
        b"Proxy-Authorization: Basic eA==\r\nAccept: */*\r\nConnection: keep-alive\r\n\r\n"
    )
    assert (head.scheme, head.host, head.port, head.path, head.target) == (
        "http",
        "pypi.org",
        80,
        "/simple/x",
        "/simple/x?q=1",
    )
    assert forwarded_head(head, 3) == (
        b"POST /simple/x?q=1 HTTP/1.1\r\nHost: pypi.org\r\nAccept: */*\r\n"
        b"Content-Length: 3\r\nConnection: close\r\n\r\n"
    )
    tunnel = parse_head(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n")
    assert (tunnel.scheme, tunnel.host, tunnel.port, tunnel.path) == ("https", "::1", 8443, "")
    for bad in (
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET https://pypi.org/ HTTP/1.1\r\n\r\n",
        b"GET http://pypi.org:99999/ HTTP/1.1\r\n\r\n",
        b"CONNECT pypi.org HTTP/1.1\r\n\r\n",
        b"GET http://pypi.org/ SPDY/3\r\n\r\n",
        b"GET http://pypi.org/ HTTP/1.1\r\nno colon\r\n\r\n",
    ):
        with pytest.raises(BadRequest):
            parse_head(bad)
