"""Core's queries answer edge inputs (NUL bytes, lone surrogates, numbers past bigint, absurd
sizes, bodies that are not JSON objects) with a structured 400, never a bare 500 or silence.
One core on a real nats-server and PostgreSQL serves the whole module; each fuzz test sends
arbitrary bodies to one endpoint and checks every reply's shape."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.micro import add_service
from nats.micro.service import EndpointConfig, ServiceConfig
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, TASKS, ensure_streams
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.catalog_commands import apply_agent, apply_flow, apply_skill
from nexus_testing import NatsServer, PostgresServer

from nexus_core.app import CoreApp

from .conftest import core_settings
from .support import AGENT_YAML, SKILL_MD, catalog_ready, event_names, eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

BIGINT_MAX = 2**63 - 1
HUGE = 99999999999999999999  # the number from issue 17: past int64 and past uint64


@dataclass
class Served:
    bus: Bus
    core: CoreApp
    run_id: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer
) -> AsyncIterator[Served]:
    """One core for the module, with an agent, a skill and one prepared run to find."""
    nats = NatsServer(tmp_path_factory.mktemp("nats"))
    nats.start()
    bus = await Bus.connect(BusSettings(url=nats.url, name="test"), source="test")
    await ensure_streams(bus.js)
    pool = await asyncpg.create_pool(
        await postgres_server.create_database(), min_size=1, max_size=8
    )
    assert pool is not None
    core = CoreApp(core_settings(), bus=bus, pool=pool)
    try:
        await core.start()
        await apply_agent(bus, AGENT_YAML)
        await apply_skill(bus, SKILL_MD)
        await apply_flow(bus, "id: edge1\nsteps: [{id: only, kind: run, agent: implementer}]\n")
        await catalog_ready(core)
        run_id = "edge1"
        raw = {"agent_id": "implementer", "task_id": "T-1", "input": "fix the bug"}
        await bus.js.publish(subjects.run_event(run_id, "requested"), json.dumps(raw).encode())
        await eventually(lambda: event_names(bus, run_id), lambda n: "prepared" in n)
        # Projections idle from here on: a test may briefly take a table away from them.
        assert core.views_runner is not None
        for stream in (RUNS, TASKS):
            last = (await bus.js.stream_info(stream)).state.last_seq
            await core.views_runner.wait_until(stream, last)
        yield Served(bus, core, run_id)
    finally:
        await core.stop()
        await pool.close()
        await bus.close()
        nats.stop(kill=True)


async def ask(bus: Bus, subject: str, payload: bytes) -> tuple[int, Any]:
    """Send raw bytes; return (code, decoded body), code 200 when no error header is set.

    Fails (rather than returning) on a timeout or a body that is not JSON: both are bugs.
    """
    msg = await bus.nc.request(subject, payload, timeout=5)
    headers = msg.headers or {}
    code = int(headers.get("Nats-Service-Error-Code", "200"))
    assert msg.data, f"empty reply (code {code}, {headers.get('Nats-Service-Error')!r})"
    return code, json.loads(msg.data)


async def bad_request(bus: Bus, subject: str, body: Any) -> dict[str, Any]:
    """Assert `body` gets a structured 400; return its error object."""
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    code, reply = await ask(bus, subject, payload)
    assert code == 400, reply
    error: dict[str, Any] = reply["error"]
    assert error["code"] == 400
    assert "\n" not in error["message"]
    return error


def locs(error: dict[str, Any]) -> set[str]:
    return {f["loc"] for f in error["fields"]}


# -- one test per edge case from issue 17 -----------------------------------------------


async def test_runs_get_nul_in_run_id(served: Served) -> None:
    error = await bad_request(served.bus, subjects.CORE_RUNS_GET, {"run_id": "edge1\x00"})
    assert locs(error) == {"run_id"}
    assert "run_id" in error["message"]


async def test_runs_get_lone_surrogate_and_overlong_run_id(served: Served) -> None:
    # The JSON parser already refuses an escaped lone surrogate: the body is the culprit.
    error = await bad_request(served.bus, subjects.CORE_RUNS_GET, {"run_id": "\ud800"})
    assert locs(error) == {"(body)"}
    error = await bad_request(served.bus, subjects.CORE_RUNS_GET, {"run_id": "r" * 100_000})
    assert locs(error) == {"run_id"}


async def test_board_get_nul_in_column(served: Served) -> None:
    error = await bad_request(served.bus, subjects.CORE_BOARD_GET, {"column": "todo\x00"})
    assert locs(error) == {"column"}


async def test_runs_list_nul_in_filters(served: Served) -> None:
    for field in ("status", "agent_id", "task_id", "origin", "cursor"):
        error = await bad_request(served.bus, subjects.CORE_RUNS_LIST, {field: "x\x00"})
        assert locs(error) == {field}, field


async def test_runs_list_since_past_any_timestamp(served: Served) -> None:
    error = await bad_request(served.bus, subjects.CORE_RUNS_LIST, {"since": HUGE})
    assert locs(error) == {"since"}


async def test_runs_list_since_that_overflows_when_made_utc(served: Served) -> None:
    # A valid Python datetime, but year 0 in UTC: PostgreSQL never sees it.
    since = "0001-01-01T00:00:00+14:00"
    error = await bad_request(served.bus, subjects.CORE_RUNS_LIST, {"since": since})
    assert locs(error) == {"since"}


async def test_runs_list_limit_past_bigint(served: Served) -> None:
    error = await bad_request(served.bus, subjects.CORE_RUNS_LIST, {"limit": HUGE})
    assert locs(error) == {"limit"}
    assert "500" in error["fields"][0]["msg"]  # says what the maximum is


async def test_runs_list_cursor_past_bigint(served: Served) -> None:
    for cursor in (str(HUGE), str(BIGINT_MAX + 1), "-1", "\u0663", "1_0", " 7 "):
        error = await bad_request(served.bus, subjects.CORE_RUNS_LIST, {"cursor": cursor})
        assert locs(error) == {"cursor"}, cursor


async def test_runs_events_from_seq_edges(served: Served) -> None:
    for from_seq in (HUGE, 2**64, BIGINT_MAX + 1, 0, -1, -HUGE):
        error = await bad_request(
            served.bus, subjects.CORE_RUNS_EVENTS, {"run_id": served.run_id, "from_seq": from_seq}
        )
        assert locs(error) == {"from_seq"}, from_seq


async def test_runs_events_limit_and_run_id_edges(served: Served) -> None:
    for body, field in (
        ({"run_id": served.run_id, "limit": HUGE}, "limit"),
        ({"run_id": served.run_id, "limit": -1}, "limit"),
        ({"run_id": "edge1\x00"}, "run_id"),
        ({"run_id": "x" * 129}, "run_id"),
        ({"run_id": served.run_id, "after_seq": 5}, "after_seq"),
    ):
        error = await bad_request(served.bus, subjects.CORE_RUNS_EVENTS, body)
        assert locs(error) == {field}, body


async def test_runs_events_far_past_the_end_is_empty(served: Served) -> None:
    body = {"run_id": served.run_id, "from_seq": BIGINT_MAX}
    code, reply = await ask(served.bus, subjects.CORE_RUNS_EVENTS, json.dumps(body).encode())
    assert (code, reply["events"]) == (200, [])


async def test_catalog_gets_nul_in_ids(served: Served) -> None:
    error = await bad_request(served.bus, subjects.CORE_CATALOG_AGENTS_GET, {"id": "a\x00"})
    assert locs(error) == {"id"}
    error = await bad_request(served.bus, subjects.CORE_CATALOG_SKILLS_GET, {"name": "p\x00"})
    assert locs(error) == {"name"}
    error = await bad_request(
        served.bus, subjects.CORE_CATALOG_SKILLS_GET, {"name": "python", "version": "1\x00"}
    )
    assert locs(error) == {"version"}


@pytest.mark.parametrize(
    "payload",
    [b"[]", b"null", b'"x"', b"17", b"{", b'{"run_id": "\xff\xfe"}', b"\xff", b"NaN"],
    ids=["list", "null", "string", "number", "truncated", "bad-utf8-value", "bad-utf8", "nan"],
)
async def test_bodies_that_are_not_json_objects(served: Served, payload: bytes) -> None:
    error = await bad_request(served.bus, subjects.CORE_RUNS_GET, payload)
    assert error["fields"], error


async def test_good_queries_still_answer(served: Served) -> None:
    code, run = await ask(
        served.bus, subjects.CORE_RUNS_GET, json.dumps({"run_id": served.run_id}).encode()
    )
    assert (code, run["run_id"]) == (200, served.run_id)
    code, missing = await ask(served.bus, subjects.CORE_RUNS_GET, b'{"run_id": "ghost"}')
    assert (code, missing["error"]["code"]) == (404, 404)
    body = {"since": "2000-01-01T00:00:00", "status": "prepared", "limit": 500}
    code, listed = await ask(served.bus, subjects.CORE_RUNS_LIST, json.dumps(body).encode())
    assert (code, [r["run_id"] for r in listed["runs"]]) == (200, [served.run_id])
    body = {"cursor": str(BIGINT_MAX)}
    code, listed = await ask(served.bus, subjects.CORE_RUNS_LIST, json.dumps(body).encode())
    assert (code, [r["run_id"] for r in listed["runs"]]) == (200, [served.run_id])


async def test_core_reports_and_rebuilds_its_own_projections(served: Served) -> None:
    code, status = await ask(served.bus, subjects.CORE_PROJECTIONS_STATUS, b"")
    assert code == 200, status
    rows = {(r["projection"], r["stream"]): r for r in status["projections"]}
    assert set(rows) == {("agent_runs", RUNS), ("board", RUNS), ("board", TASKS)}
    runs_last = (await served.bus.js.stream_info(RUNS)).state.last_seq
    assert rows["agent_runs", RUNS]["stream_last_seq"] == runs_last
    assert rows["agent_runs", RUNS]["behind"] == runs_last - rows["agent_runs", RUNS]["checkpoint"]
    before = await served.core.pool.fetch(
        "SELECT doc FROM core_agent_runs.agent_runs ORDER BY run_id"
    )
    code, rebuilt = await ask(
        served.bus, subjects.CORE_PROJECTIONS_REBUILD, b'{"projection": "agent_runs"}'
    )
    assert (code, rebuilt["projection"]) == (200, "agent_runs"), rebuilt
    assert rebuilt["applied"] == runs_last  # every NEXUS_RUNS event, replayed once
    after = await served.core.pool.fetch(
        "SELECT doc FROM core_agent_runs.agent_runs ORDER BY run_id"
    )
    assert [r["doc"] for r in after] == [r["doc"] for r in before]
    error = await bad_request(
        served.bus, subjects.CORE_PROJECTIONS_REBUILD, {"projection": "memory"}
    )
    assert locs(error) == {"projection"}


async def test_a_database_failure_answers_json_500_and_logs(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    # A real failure inside the real handler: the table board.get reads is briefly gone.
    pool = served.core.pool
    assert pool is not None
    await pool.execute("ALTER TABLE core_board.tasks RENAME TO tasks_away")
    try:
        with caplog.at_level(logging.ERROR, logger="nexus_core.queries"):
            code, reply = await ask(served.bus, subjects.CORE_BOARD_GET, b"{}")
    finally:
        await pool.execute("ALTER TABLE core_board.tasks_away RENAME TO tasks")
    assert (code, reply["error"]["code"]) == (500, 500)
    assert "tasks" not in reply["error"]["message"]  # internals stay in the log
    assert any(subjects.CORE_BOARD_GET in r.getMessage() for r in caplog.records)
    code, board = await ask(served.bus, subjects.CORE_BOARD_GET, b"{}")
    assert (code, [t["task_id"] for t in board["tasks"]]) == (200, ["T-1"])


async def test_a_handler_crash_answers_json_500_and_logs(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    from nexus_core.queries import endpoint_handler
    from nexus_core.query_models import RunsGet

    async def crash(query: RunsGet) -> dict[str, Any]:
        raise RuntimeError(f"disk on fire under {query.run_id}")

    subject = f"test.crash.{uuid.uuid4().hex}"
    service = await add_service(
        served.bus.nc, ServiceConfig(name="crash-test", version="0.0.1", description="crashes")
    )
    try:
        handler = endpoint_handler(RunsGet, crash)
        await service.add_endpoint(EndpointConfig(name="crash", subject=subject, handler=handler))
        with caplog.at_level(logging.ERROR, logger="nexus_core.queries"):
            code, reply = await ask(served.bus, subject, b'{"run_id": "r9"}')
    finally:
        await service.stop()
    assert (code, reply["error"]["code"]) == (500, 500)
    assert "disk on fire" not in reply["error"]["message"]  # internals stay in the log
    assert any(subject in r.getMessage() and r.exc_info is not None for r in caplog.records), (
        caplog.records
    )


# -- fuzz: every endpoint, arbitrary bodies ---------------------------------------------

# Hypothesis favours the first entries of a list (they shrink best): the worst values come first.
_edge_ints = st.sampled_from([HUGE, 2**64, BIGINT_MAX + 1, -1, 0, -HUGE, BIGINT_MAX, 501, 500, 1])
_edge_strings = st.sampled_from(
    [
        "edge1\x00",
        "\x00",
        "x" * 300,
        str(HUGE),
        "\ud800",
        "",
        "edge1",
        "todo",
        "prepared",
        "python",
        "1",
    ]
)
# Text PostgreSQL cannot store (NUL) and text a subject cannot carry, spliced into plain text.
_spliced = st.builds(
    lambda a, bad, b: a + bad + b,
    st.text(max_size=8),
    st.sampled_from(["\x00", ".", " "]),
    st.text(max_size=8),
)
_strings = st.one_of(
    _edge_strings,
    _spliced,
    st.text(max_size=40),
    st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
)
_numbers = st.one_of(_edge_ints, _edge_ints, st.integers(), st.floats())
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _strings)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


# Edge values get their own branch so that the fields of an endpoint meet NUL bytes, subject
# separators and numbers past bigint far more often than st.text()/st.integers() offer them
# (measured: a NUL run_id in about 10 to 20 of 100 examples).
_edge = st.one_of(_edge_strings, _edge_ints, _spliced)
_values = st.one_of(_strings, _numbers, st.none(), _json)


def bodies(fields: list[str], valid: dict[str, Any]) -> st.SearchStrategy[bytes]:
    """Mostly objects over the endpoint's own fields: a `valid` body with one field made an
    edge value (so that value, not a missing id, decides the reply), any mix of fields, a
    stray field; then any JSON value and raw bytes."""
    own = st.fixed_dictionaries({}, optional=dict.fromkeys(fields, _edge | _values))
    shapes: list[st.SearchStrategy[Any]] = [
        own,
        st.builds(lambda d, v: {**d, "extra": v}, own, _scalars),
        _json,
    ]
    if fields:
        pinned = st.builds(lambda f, v: {**valid, f: v}, st.sampled_from(fields), _edge)
        shapes.insert(0, pinned)
    as_json = st.one_of(*shapes).map(lambda v: json.dumps(v).encode())
    return st.one_of(as_json, st.binary(max_size=40))


# Each core query and the fields of its body, which the fuzzer fills. Spelled out rather than
# read from nexus_core.query_models so that this module also runs against a core without it.
FUZZED: dict[str, list[str]] = {
    subjects.CORE_RUNS_GET: ["run_id"],
    subjects.CORE_RUNS_LIST: [
        *("status", "agent_id", "task_id", "origin", "since"),
        *("flow", "flow_run_id", "text", "golden", "limit", "cursor"),
    ],
    subjects.CORE_RUNS_EVENTS: ["run_id", "from_seq", "limit"],
    subjects.CORE_BOARD_GET: ["column", "include_deleted"],
    subjects.CORE_CATALOG_AGENTS_LIST: [],
    subjects.CORE_CATALOG_AGENTS_GET: ["id", "revision"],
    subjects.CORE_CATALOG_SKILLS_LIST: [],
    subjects.CORE_CATALOG_SKILLS_GET: ["name", "version"],
    subjects.CORE_CATALOG_FLOWS_LIST: [],
    subjects.CORE_CATALOG_FLOWS_GET: ["id", "revision"],
    subjects.CORE_PROJECTIONS_STATUS: [],
    subjects.CORE_PROJECTIONS_REBUILD: ["projection"],
    subjects.CORE_CATALOG_HISTORY: ["kind", "id"],
    subjects.CORE_USAGE_SUMMARY: [
        *("by", "since", "until", "agent_id", "flow", "task_id", "limit")
    ],
}


# The smallest body each query with a required field answers with 200 or 404.
VALID: dict[str, dict[str, Any]] = {
    subjects.CORE_RUNS_GET: {"run_id": "edge1"},
    subjects.CORE_RUNS_EVENTS: {"run_id": "edge1"},
    subjects.CORE_CATALOG_AGENTS_GET: {"id": "implementer"},
    subjects.CORE_CATALOG_SKILLS_GET: {"name": "python"},
    subjects.CORE_CATALOG_FLOWS_GET: {"id": "edge1"},
    subjects.CORE_PROJECTIONS_REBUILD: {"projection": "board"},
    subjects.CORE_CATALOG_HISTORY: {"kind": "agent", "id": "implementer"},
    subjects.CORE_USAGE_SUMMARY: {"by": "agent"},
}


async def test_every_query_and_field_is_fuzzed() -> None:
    from nexus_core import query_models as m

    models = {
        subjects.CORE_RUNS_GET: m.RunsGet,
        subjects.CORE_RUNS_LIST: m.RunsList,
        subjects.CORE_RUNS_EVENTS: m.RunsEvents,
        subjects.CORE_BOARD_GET: m.BoardGet,
        subjects.CORE_CATALOG_AGENTS_LIST: m.EmptyQuery,
        subjects.CORE_CATALOG_AGENTS_GET: m.AgentGet,
        subjects.CORE_CATALOG_SKILLS_LIST: m.EmptyQuery,
        subjects.CORE_CATALOG_SKILLS_GET: m.SkillGet,
        subjects.CORE_CATALOG_FLOWS_LIST: m.EmptyQuery,
        subjects.CORE_CATALOG_FLOWS_GET: m.FlowDefinitionGet,
        subjects.CORE_PROJECTIONS_STATUS: m.EmptyQuery,
        subjects.CORE_PROJECTIONS_REBUILD: m.ProjectionRebuild,
        subjects.CORE_CATALOG_HISTORY: m.CatalogHistory,
        subjects.CORE_USAGE_SUMMARY: m.UsageSummary,
    }
    core_queries = {s for s in subjects.QUERY_SUBJECTS if s.startswith("nexus.core.")}
    assert core_queries == set(FUZZED)
    assert {s: list(model.model_fields) for s, model in models.items()} == FUZZED


def _fuzz(subject: str) -> Any:
    @settings(
        max_examples=100,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(payload=bodies(FUZZED[subject], VALID.get(subject, {})))
    async def fuzz(served: Served, payload: bytes) -> None:
        code, reply = await ask(served.bus, subject, payload)
        assert code in {200, 400, 404}, (code, reply)
        assert isinstance(reply, dict), reply
        if code != 200:
            assert reply["error"]["code"] == code
            assert isinstance(reply["error"]["message"], str)
            assert reply["error"]["message"]

    return fuzz


test_fuzz_runs_get = _fuzz(subjects.CORE_RUNS_GET)
test_fuzz_runs_list = _fuzz(subjects.CORE_RUNS_LIST)
test_fuzz_runs_events = _fuzz(subjects.CORE_RUNS_EVENTS)
test_fuzz_board_get = _fuzz(subjects.CORE_BOARD_GET)
test_fuzz_agents_list = _fuzz(subjects.CORE_CATALOG_AGENTS_LIST)
test_fuzz_agents_get = _fuzz(subjects.CORE_CATALOG_AGENTS_GET)
test_fuzz_skills_list = _fuzz(subjects.CORE_CATALOG_SKILLS_LIST)
test_fuzz_skills_get = _fuzz(subjects.CORE_CATALOG_SKILLS_GET)
test_fuzz_flows_list = _fuzz(subjects.CORE_CATALOG_FLOWS_LIST)
test_fuzz_flows_get = _fuzz(subjects.CORE_CATALOG_FLOWS_GET)
test_fuzz_projections_status = _fuzz(subjects.CORE_PROJECTIONS_STATUS)
test_fuzz_projections_rebuild = _fuzz(subjects.CORE_PROJECTIONS_REBUILD)
