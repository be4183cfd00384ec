"""The roles table (`nexus_events.contract.roles`) covers the whole contract and agrees with what
the deployed services may do on NATS (deploy/nats/render.py) and with the subjects their code
publishes on and consumes."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from nexus_events.contract import roles, subjects
from nexus_events.contract.roles import EVENT_ROLES, QUERY_ROLES, Party, Service
from nexus_events.contract.streams import STREAM_OF_FAMILY
from nexus_events.contract.subjects import Family
from nexus_events.events import registered

from tests.support.nats_render import load_renderer

ROOT = Path(__file__).resolve().parents[2]
KNOWN_SERVICES = {
    "core",
    "console",
    "scheduler",
    "runner",
    "cli",
    "memory",
    "plane-sync",
    "channel-gateway",
    "flows",
    "lab",
    "spend",
    "mcp",
    "operator",
}
# Where each service's code lives, for the scan of the subjects it builds.
SOURCES = {
    Service.CORE: ROOT / "services/core/src",
    Service.SCHEDULER: ROOT / "services/scheduler/src",
    Service.RUNNER: ROOT / "services/runner/src",
    Service.CLI: ROOT / "cli/src",
}


@pytest.fixture(scope="module")
def render() -> ModuleType:
    return load_renderer()


def _sample_subject(family: Family, name: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", subjects.address_template(family, name))


def _real(parties: tuple[Party, ...]) -> set[Service]:
    return {p.service for p in parties if not p.planned}


# --- coverage ----------------------------------------------------------------------------


def test_every_registered_event_has_roles_and_no_more() -> None:
    assert set(registered()) == set(EVENT_ROLES)


def test_every_query_subject_has_roles_and_no_more() -> None:
    assert set(subjects.QUERY_SUBJECTS) == set(QUERY_ROLES)


def test_only_known_services() -> None:
    assert {s.value for s in Service} == KNOWN_SERVICES


def test_each_event_has_a_publisher_and_a_consumer_listed_once() -> None:
    for key, entry in EVENT_ROLES.items():
        for side in (entry.publishers, entry.consumers):
            assert side, f"{key}: nobody on one side"
            services = [p.service for p in side]
            assert len(services) == len(set(services)), f"{key}: a service listed twice"


def test_planned_roles_are_only_of_services_that_lack_them_in_code() -> None:
    # A planned role of an implemented service must not also be a real one (contradiction).
    for key, entry in EVENT_ROLES.items():
        for side in (entry.publishers, entry.consumers):
            planned = {p.service for p in side if p.planned}
            assert not planned & _real(side), key
    assert isinstance(roles.planned(Service.MEMORY), Party)


# --- against the NATS permissions of the deployed services ------------------------------------


def _deployed(render: ModuleType) -> dict[Service, Any]:
    return {Service(name): access for name, access in render.SERVICES.items()}


def test_every_deployed_publisher_may_publish(render: ModuleType) -> None:
    deployed = _deployed(render)
    for (family, name), entry in EVENT_ROLES.items():
        subject = _sample_subject(family, name)
        if family is Family.DLQ:
            # A service files dead letters on its own subject only.
            for service in _real(entry.publishers) & deployed.keys():
                own = subjects.dead_letter(service.value)
                assert own in deployed[service].publishes, service
            continue
        for service in _real(entry.publishers) & deployed.keys():
            allowed = deployed[service].publishes
            assert any(subjects.matches(p, subject) for p in allowed), (
                f"roles say {service} publishes {family}.{name}, "
                "deploy/nats/render.py does not allow it"
            )


def test_every_deployed_consumer_may_read_the_stream(render: ModuleType) -> None:
    deployed = _deployed(render)
    for (family, name), entry in EVENT_ROLES.items():
        stream = STREAM_OF_FAMILY[family]
        for service in _real(entry.consumers) & deployed.keys():
            assert stream in deployed[service].reads, (
                f"roles say {service} consumes {family}.{name}, "
                f"deploy/nats/render.py gives it no access to {stream}"
            )


def test_every_stream_a_service_reads_has_an_event_it_consumes(render: ModuleType) -> None:
    for service, access in _deployed(render).items():
        consumed = {
            STREAM_OF_FAMILY[family]
            for (family, _), entry in EVENT_ROLES.items()
            if service in _real(entry.consumers)
        }
        assert set(access.reads) <= consumed, f"{service} reads streams the roles do not name"


def test_event_specific_permissions_are_roles(render: ModuleType) -> None:
    # Permissions that name one event (not a family wildcard) say exactly who publishes it.
    for service, access in _deployed(render).items():
        for pattern in access.publishes:
            if pattern.endswith((".*", ">")) or pattern.startswith("nexus.dlq."):
                continue
            for (family, name), entry in EVENT_ROLES.items():
                if subjects.matches(pattern, _sample_subject(family, name)):
                    assert service in _real(entry.publishers), (
                        f"deploy lets {service} publish {family}.{name}; roles do not list it"
                    )


def test_queries_match_what_services_serve_and_ask(render: ModuleType) -> None:
    deployed = _deployed(render)
    for subject, entry in QUERY_ROLES.items():
        if not entry.server.planned and entry.server.service in deployed:
            assert subject in deployed[entry.server.service].serves, subject
        for service in _real(entry.clients) & deployed.keys():
            assert subject in deployed[service].requests, (service, subject)
    for service, access in deployed.items():
        for subject in access.serves:
            assert QUERY_ROLES[subject].server == Party(service), subject
        for subject in access.requests:
            assert service in _real(QUERY_ROLES[subject].clients), subject


# --- against the code ------------------------------------------------------------------------

# A subject built with a named event, where it is published: `publish(`, `bus.encode(` or
# `Outgoing(` right before `subjects.run_event(<anything>, <event>)`, the event a literal
# (`"completed"`), a `RunEvent` member (`RunEvent.COMPLETED`) or a model class (`RunCompleted`).
# (The same builders also name subjects to read, e.g. the runner's replay positions.)
_BUILDER = re.compile(
    r"(?:publish\w*|encode|Outgoing)\(\s*"
    r"subjects\.(run_event|task_event|schedule_event)\(\s*[^()]*?,\s*"
    r"(?:\"(\w+)\"|RunEvent\.(\w+)|([A-Z]\w+))\s*\)",
    re.DOTALL,
)
_FAMILY_OF_BUILDER = {
    "run_event": Family.RUN,
    "task_event": Family.TASK,
    "schedule_event": Family.SCHEDULE,
}
# The one way to ask for a run or a flow run (nexus_events.transport.run_requests).
_REQUEST = re.compile(r"\b(request_run|run_request|request_flow|flow_request)\(")
_REQUESTED = {
    "request_run": (Family.RUN, "requested"),
    "run_request": (Family.RUN, "requested"),
    "request_flow": (Family.FLOW, "requested"),
    "flow_request": (Family.FLOW, "requested"),
}
_NAME_OF_MODEL = {(family, model.__name__): name for (family, name), model in registered().items()}


def _published_in_code(service: Service) -> set[tuple[Family, str]]:
    found = set()
    for path in SOURCES[service].rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for builder, literal, member, model in _BUILDER.findall(text):
            family = _FAMILY_OF_BUILDER[builder]
            name = literal or member.lower() or _NAME_OF_MODEL[(family, model)]
            found.add((family, name))
        found.update(_REQUESTED[call] for call in _REQUEST.findall(text))
    return found


@pytest.mark.parametrize("service", list(SOURCES))
def test_subjects_built_in_code_are_published_per_roles(service: Service) -> None:
    found = _published_in_code(service)
    assert found or service is Service.RUNNER, f"the scan finds nothing in {service}'s code"
    for key in found:
        assert service in _real(EVENT_ROLES[key].publishers), (
            f"{service}'s code publishes {key[0]}.{key[1]}; nexus_events.contract.roles does not"
            " say so"
        )


def test_scheduler_admission_events_are_consumed_per_roles() -> None:
    from nexus_scheduler.service import WATCHED_EVENTS

    for name in WATCHED_EVENTS:
        assert Service.SCHEDULER in _real(EVENT_ROLES[(Family.RUN, name)].consumers), name


def test_runner_publishes_what_its_publisher_may_send() -> None:
    # The runner's events are built from their models (subjects.run_event(run_id, name)),
    # so check the models its code constructs instead of subject literals.
    source = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES[Service.RUNNER].rglob("*.py"))
    for (family, name), model in registered().items():
        if family is Family.RUN and re.search(rf"\b{model.__name__}\(", source):
            assert Service.RUNNER in _real(EVENT_ROLES[(family, name)].publishers), name


# --- the MCP server's NATS users (render.CLIENTS: no service of the table) -------------------


def _mcp_consumed() -> set[str]:
    return {
        STREAM_OF_FAMILY[family]
        for (family, _), entry in EVENT_ROLES.items()
        if Service.MCP in _real(entry.consumers)
    }


def test_the_client_users_are_the_mcp_party(render: ModuleType) -> None:
    assert set(render.CLIENT_ROLES) == set(render.CLIENTS) == {"mcp-read", "mcp-operate"}
    assert set(render.CLIENT_ROLES.values()) == {Service.MCP.value}
    assert not set(render.CLIENTS) & set(render.SERVICES)


def test_mcp_operate_may_publish_what_the_roles_say_and_read_nothing(render: ModuleType) -> None:
    operate, read = render.CLIENTS["mcp-operate"], render.CLIENTS["mcp-read"]
    assert read.publishes == ()
    for (family, name), entry in EVENT_ROLES.items():
        subject = _sample_subject(family, name)
        if Service.MCP in _real(entry.publishers):
            assert any(subjects.matches(p, subject) for p in operate.publishes), (family, name)
    for pattern in operate.publishes:
        if pattern.endswith((".*", ">")):
            continue
        for (family, name), entry in EVENT_ROLES.items():
            if subjects.matches(pattern, _sample_subject(family, name)):
                assert Service.MCP in _real(entry.publishers), (family, name)


def test_the_mcp_users_read_the_streams_the_roles_say(render: ModuleType) -> None:
    for user, access in render.CLIENTS.items():
        assert set(access.reads) == _mcp_consumed(), user


def test_the_mcp_users_ask_the_queries_the_roles_say(render: ModuleType) -> None:
    operate, read = render.CLIENTS["mcp-operate"], render.CLIENTS["mcp-read"]
    asked = {s for s, entry in QUERY_ROLES.items() if Service.MCP in _real(entry.clients)}
    assert set(operate.requests) == asked
    # A read token asks every query but the write one (memory's guarded record).
    assert set(read.requests) == asked - {subjects.MEMORY_RECORD}
