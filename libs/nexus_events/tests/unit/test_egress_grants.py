"""Egress grants fail closed: a grant that does not parse refuses the whole agent definition
with a line naming it; a valid one matches only what it says."""

from __future__ import annotations

import pytest
from nexus_events.contract.documents import parse_agent, parse_skill, render_skill
from nexus_events.errors import DocumentInvalid
from nexus_events.events import EgressGrant

AGENT = """
id: fetcher
role: custom
model: {name: m}
system_prompt: You fetch.
egress:
"""


@pytest.mark.parametrize(
    ("grant", "located", "says"),
    [
        ("{host: 'pypi.org/simple'}", "egress.0.host", "'pypi.org/simple' is not a host name"),
        ("{host: '*'}", "egress.0.host", "is not a host name"),
        ("{host: 'a..b'}", "egress.0.host", "is not a host name"),
        ("{host: ''}", "egress.0.host", "is not a host name"),
        ("{host: pypi.org, port: 0}", "egress.0.port", "greater than or equal to 1"),
        ("{host: pypi.org, port: 70000}", "egress.0.port", "less than or equal to 65535"),
        ("{host: pypi.org, methods: []}", "egress.0.methods", "an empty list allows nothing"),
        ("{host: pypi.org, methods: [GET, CONNECT]}", "egress.0.methods", "['CONNECT']"),
        ("{host: pypi.org, paths: [simple/*]}", "egress.0.paths", "starts with '/'"),
        ("{host: pypi.org, paths: ['/a b']}", "egress.0.paths", "no spaces"),
        ("{host: pypi.org, verbs: [GET]}", "egress.0.verbs", "Extra inputs are not permitted"),
        ("pypi.org", "egress.0", "valid dictionary"),
    ],
)
def test_a_bad_grant_refuses_the_definition_naming_it(grant: str, located: str, says: str) -> None:
    with pytest.raises(DocumentInvalid) as info:
        parse_agent(
            AGENT
            + f"  - {{host: files.pythonhosted.org}}\n  - {grant}\n".replace("egress.0", "egress.1")
        )
    errors = [(e.loc, e.msg) for e in info.value.errors]
    assert len(errors) == 1, errors
    assert errors[0][0] == located.replace("egress.0", "egress.1")
    assert says in errors[0][1]


def test_agents_and_skills_carry_grants_and_default_to_none() -> None:
    agent = parse_agent(AGENT + "  - {host: '*.PyPI.org', methods: [get], paths: ['/simple/*']}\n")
    assert agent.egress == [EgressGrant(host="*.pypi.org", methods=["GET"], paths=["/simple/*"])]
    assert parse_agent(AGENT.replace("egress:\n", "")).egress == []
    skill = parse_skill(
        "---\nname: s\nversion: '1'\negress: [{host: 10.0.0.7, port: 3141}]\n---\nx"
    )
    assert skill.egress == [EgressGrant(host="10.0.0.7", port=3141)]
    assert parse_skill(render_skill(skill)) == skill


def test_a_grant_matches_only_what_it_names() -> None:
    wild = EgressGrant(host="*.example.com")
    assert wild.matches_host("api.example.com")
    assert wild.matches_host("A.B.Example.COM.")
    assert not wild.matches_host("example.com")  # the sub-domains, not the name itself
    assert not wild.matches_host("evilexample.com")
    assert not wild.matches_host("93.184.216.34")  # a wildcard never matches an address
    assert wild.matches_port(443, "https")
    assert wild.matches_port(80, "http")
    assert not wild.matches_port(8080, "http")
    literal = EgressGrant(host="::1", port=8080)
    assert literal.matches_host("[::1]")
    assert not literal.matches_host("::ffff:127.0.0.1")
    assert literal.matches_port(8080, "https")
    ruled = EgressGrant(host="pypi.org", methods=["GET", "HEAD"], paths=["/simple/*", "/pypi/*"])
    assert ruled.checks_request
    assert ruled.matches_request("get", "/simple/requests/")
    assert not ruled.matches_request("POST", "/simple/requests/")
    assert not ruled.matches_request("GET", "/admin")
    assert not EgressGrant(host="pypi.org").checks_request
