"""The queries the console reads through (issue 38): runs.list by flow, flow run and free text,
run labels, usage.summary, catalog.history and agents.get at a revision."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunCompleted, RunResult, RunTurn
from nexus_events.transport.bus import Bus, Outgoing
from nexus_events.transport.catalog_commands import (
    apply_agent,
    apply_flow,
    apply_skill,
    delete_agent,
)

from nexus_core.app import CoreApp

from .support import AGENT_YAML, SKILL_MD, catalog_ready, query

REVIEWER_YAML = AGENT_YAML.replace("id: implementer", "id: reviewer")
FLOW_YAML = """
id: review
steps:
  - id: implement
    kind: run
    agent: implementer
    input: "Do it: {{ input }}"
"""


async def _catalog(bus: Bus, core: CoreApp) -> None:
    await apply_agent(bus, AGENT_YAML)
    await apply_agent(bus, REVIEWER_YAML)
    await apply_skill(bus, SKILL_MD)
    await catalog_ready(core)


async def _request(bus: Bus, run_id: str, **body: Any) -> None:
    request = {"agent_id": "implementer", "input": "work", **body}
    await bus.js.publish(
        subjects.run_event(run_id, RunEvent.REQUESTED), json.dumps(request).encode()
    )


def _flow_labels(flow_run_id: str, step: str) -> dict[str, str]:
    return {"flow": "review", "flow_run_id": flow_run_id, "step": step, "round": "1"}


async def _caught_up(core: CoreApp, bus: Bus) -> None:
    assert core.views_runner is not None
    await core.views_runner.wait_until(RUNS, (await bus.js.stream_info(RUNS)).state.last_seq)


async def _listed(bus: Bus, **filters: Any) -> list[str]:
    error, body = await query(bus, subjects.CORE_RUNS_LIST, filters)
    assert error is None, body
    return [r["run_id"] for r in body["runs"]]


async def _pages(bus: Bus, **filters: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    cursor = None
    while True:
        body = {**filters, **({"cursor": cursor} if cursor else {})}
        error, reply = await query(bus, subjects.CORE_RUNS_LIST, body)
        assert error is None, reply
        pages.append([r["run_id"] for r in reply["runs"]])
        cursor = reply["next_cursor"]
        if cursor is None:
            return pages


async def test_runs_list_by_flow_flow_run_and_text_with_labels(
    bus: Bus, core: CoreApp, core_pool: asyncpg.Pool[Any]
):
    await _catalog(bus, core)
    for i in range(1, 6):
        flow_run = "fr-1" if i <= 3 else "fr-2"
        await _request(bus, f"cq-flow-{i}", labels=_flow_labels(flow_run, f"s{i}"))
    await _request(bus, "cq-p1", input="Fix 100% of the_bug", requested_by="Alice")
    await _request(bus, "cq-p2", input="fix 100 of thexbug", task_id="T-X", agent_id="reviewer")
    await _caught_up(core, bus)

    flows = [f"cq-flow-{i}" for i in range(5, 0, -1)]
    assert await _listed(bus, flow="review") == flows
    assert await _listed(bus, flow_run_id="fr-1") == flows[2:]
    assert await _listed(bus, flow_run_id="fr-2", flow="review") == flows[:2]
    assert await _listed(bus, flow="other") == []
    # The cursor pages through a filtered list without gaps or repeats.
    assert await _pages(bus, flow="review", limit=2) == [flows[:2], flows[2:4], flows[4:]]
    assert await _pages(bus, text="cq-", limit=3) == [
        ["cq-p2", "cq-p1", flows[0]],
        flows[1:4],
        flows[4:],
    ]
    # `%` and `_` are themselves, not wildcards; case does not matter; each column is searched.
    assert await _listed(bus, text="100%") == ["cq-p1"]
    assert await _listed(bus, text="the_bug") == ["cq-p1"]
    assert await _listed(bus, text="ALICE") == ["cq-p1"]
    assert await _listed(bus, text="t-x") == ["cq-p2"]
    assert await _listed(bus, text="REVIEWER") == ["cq-p2"]
    assert await _listed(bus, text="FLOW-3") == ["cq-flow-3"]
    assert await _listed(bus, text="cq-flow", flow_run_id="fr-2", limit=1) == ["cq-flow-5"]
    assert await _listed(bus, text="\\") == []

    error, run = await query(bus, subjects.CORE_RUNS_GET, {"run_id": "cq-flow-2"})
    assert error is None
    assert run["labels"] == _flow_labels("fr-1", "s2")
    error, plain = await query(bus, subjects.CORE_RUNS_GET, {"run_id": "cq-p1"})
    assert plain["labels"] == {}

    # Rows folded before the labels were kept (older documents): a rebuild fills them.
    await core_pool.execute(
        "UPDATE core_agent_runs.agent_runs SET doc = doc - 'labels', labels = '{}',"
        " flow = NULL, flow_run_id = NULL"
    )
    assert await _listed(bus, flow="review") == []
    error, _ = await query(bus, subjects.CORE_PROJECTIONS_REBUILD, {"projection": "agent_runs"})
    assert error is None
    assert await _listed(bus, flow="review") == flows
    _, run = await query(bus, subjects.CORE_RUNS_GET, {"run_id": "cq-flow-2"})
    assert run["labels"] == _flow_labels("fr-1", "s2")


async def test_runs_list_refuses_bad_new_filters(bus: Bus, core: CoreApp):
    for body in ({"flow": "a.b"}, {"flow_run_id": ""}, {"text": ""}, {"text": "x" * 300}):
        error, reply = await query(bus, subjects.CORE_RUNS_LIST, body)
        assert error == "400", body
        assert reply["error"]["fields"][0]["loc"] == next(iter(body))


async def _spend(bus: Bus, run_id: str, turns: list[tuple[int, int, float]]) -> None:
    out = [
        Outgoing(
            subjects.run_event(run_id, RunEvent.TURN),
            RunTurn(turn=n, tokens_in=i, tokens_out=o, cost_usd=c),
        )
        for n, (i, o, c) in enumerate(turns, start=1)
    ]
    out.append(
        Outgoing(
            subjects.run_event(run_id, RunEvent.COMPLETED),
            RunCompleted(result=RunResult(summary="done")),
        )
    )
    await bus.publish_many(out)


async def _usage(bus: Bus, **body: Any) -> list[tuple[Any, ...]]:
    error, reply = await query(bus, subjects.CORE_USAGE_SUMMARY, body)
    assert error is None, reply
    assert reply["by"] == body["by"]
    return [
        (r["key"], r["runs"], r["tokens_in"], r["tokens_out"], r["cost_usd"], r["turns"])
        for r in reply["rows"]
    ]


async def test_usage_summary_groups_filters_and_orders(
    bus: Bus, core: CoreApp, core_pool: asyncpg.Pool[Any]
):
    await _catalog(bus, core)
    flow = _flow_labels("fr-1", "implement")
    await _request(bus, "u1", task_id="T-1", origin="cli", labels=flow)
    await _request(bus, "u2", task_id="T-2", origin="plane")
    await _request(bus, "u3", agent_id="reviewer", task_id="T-1", origin="cli", labels=flow)
    await _spend(bus, "u1", [(10, 2, 0.5), (20, 3, 0.25)])
    await _spend(bus, "u2", [(5, 1, 0.1)])
    await _spend(bus, "u3", [(40, 4, 2.0)])
    await _caught_up(core, bus)

    assert await _usage(bus, by="agent") == [
        ("reviewer", 1, 40, 4, 2.0, 1),
        ("implementer", 2, 35, 6, 0.85, 3),
    ]
    assert await _usage(bus, by="flow") == [("review", 2, 70, 9, 2.75, 3), (None, 1, 5, 1, 0.1, 1)]
    assert await _usage(bus, by="origin") == [
        ("cli", 2, 70, 9, 2.75, 3),
        ("plane", 1, 5, 1, 0.1, 1),
    ]
    assert await _usage(bus, by="task", agent_id="implementer") == [
        ("T-1", 1, 30, 5, 0.75, 2),
        ("T-2", 1, 5, 1, 0.1, 1),
    ]
    assert await _usage(bus, by="agent", flow="review", task_id="T-1", limit=1) == [
        ("reviewer", 1, 40, 4, 2.0, 1)
    ]
    assert await _usage(bus, by="agent", agent_id="nobody") == []

    # Days are the UTC dates the runs were requested, oldest first: move u2 to yesterday.
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    yesterday = today - timedelta(days=1)
    await core_pool.execute(
        "UPDATE core_agent_runs.agent_runs SET requested_at = $1 WHERE run_id = 'u2'",
        yesterday + timedelta(hours=23, minutes=59),
    )
    day, before = today.date().isoformat(), yesterday.date().isoformat()
    assert await _usage(bus, by="day") == [
        (before, 1, 5, 1, 0.1, 1),
        (day, 2, 70, 9, 2.75, 3),
    ]
    assert await _usage(bus, by="day", since=today.isoformat()) == [(day, 2, 70, 9, 2.75, 3)]
    assert await _usage(bus, by="day", until=today.isoformat()) == [(before, 1, 5, 1, 0.1, 1)]

    for bad in ({"by": "week"}, {}, {"by": "day", "limit": 0}, {"by": "day", "flow": "a b"}):
        error, reply = await query(bus, subjects.CORE_USAGE_SUMMARY, bad)
        assert error == "400", bad
        assert reply["error"]["fields"], bad


async def test_catalog_history_and_agent_at_a_revision(bus: Bus, core: CoreApp):
    await apply_agent(bus, AGENT_YAML)
    await apply_agent(bus, AGENT_YAML.replace("You implement", "You build"))
    await delete_agent(bus, "implementer")
    await apply_skill(bus, SKILL_MD)
    await apply_flow(bus, FLOW_YAML)
    await catalog_ready(core)

    error, history = await query(
        bus, subjects.CORE_CATALOG_HISTORY, {"kind": "agent", "id": "implementer"}
    )
    assert error is None, history
    assert (history["kind"], history["id"]) == ("agent", "implementer")
    revisions = history["revisions"]
    assert [(r["revision"], r["deleted"]) for r in revisions] == [(1, False), (2, False), (3, True)]
    assert revisions[0]["definition"]["system_prompt"] == "You implement tasks."
    assert revisions[1]["definition"]["system_prompt"] == "You build tasks."
    assert revisions[2]["definition"] is None

    _, skill = await query(bus, subjects.CORE_CATALOG_HISTORY, {"kind": "skill", "id": "python"})
    assert [(r["revision"], r["definition"]["version"]) for r in skill["revisions"]] == [
        (1, "1.0.0")
    ]
    _, flow = await query(bus, subjects.CORE_CATALOG_HISTORY, {"kind": "flow", "id": "review"})
    assert [r["definition"]["id"] for r in flow["revisions"]] == ["review"]
    error, ghost = await query(bus, subjects.CORE_CATALOG_HISTORY, {"kind": "flow", "id": "x"})
    assert (error, ghost["revisions"]) == (None, [])

    # An agent's revision stays readable after the agent is updated and deleted.
    error, old = await query(
        bus, subjects.CORE_CATALOG_AGENTS_GET, {"id": "implementer", "revision": 1}
    )
    assert error is None, old
    assert (old["revision"], old["definition"]["system_prompt"]) == (1, "You implement tasks.")
    for body in ({"id": "implementer"}, {"id": "implementer", "revision": 3}):
        error, missing = await query(bus, subjects.CORE_CATALOG_AGENTS_GET, body)
        assert error == "404", body
        assert "implementer" in missing["error"]["message"]

    for bad in (
        {"kind": "model", "id": "x"},
        {"kind": "agent"},
        {"kind": "agent", "id": "a.b"},
        {"kind": "agent", "id": "x", "extra": 1},
    ):
        error, reply = await query(bus, subjects.CORE_CATALOG_HISTORY, bad)
        assert error == "400", bad
        assert reply["error"]["fields"], bad
    error, _ = await query(bus, subjects.CORE_CATALOG_AGENTS_GET, {"id": "x", "revision": 0})
    assert error == "400"
