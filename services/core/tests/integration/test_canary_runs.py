"""An agent's canary end to end on real NATS + PostgreSQL: runs split between the arms by
run id, the policy promotes or rolls back once, and a bad canary is refused at apply."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import CATALOG
from nexus_events.events import RunCompleted, RunFailed, RunPrepared, RunRequested
from nexus_events.events.lab import CanaryDecided
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nexus_core.app import CoreApp
from nexus_core.canary_runner import CanaryRunner
from nexus_core.lab_assembly import canary_draw
from nexus_core.run_metrics import RunMetrics

from ..metrics_support import points, value
from .support import AGENT_YAML, catalog_ready, eventually, query, run_events

AGENT = AGENT_YAML.replace("skills: [python]\n", "")
CANDIDATE = AGENT.replace("You implement tasks.", "You implement tasks, carefully.")
CANARY = (
    "canary: {revision: 2, share: 0.5,"
    " promote_when: {min_runs: 3, max_success_drop: 0.0},"
    " rollback_when: {min_runs: 3, max_success_drop: 0.5}}\n"
)
RUNS = 20


async def _agent_with_canary(bus: Bus, core: CoreApp) -> None:
    """implementer 1 (current), 2 (candidate), 3 = 1 with a canary on 2."""
    await apply_agent(bus, AGENT)
    await apply_agent(bus, CANDIDATE)
    await apply_agent(bus, AGENT + CANARY)
    await catalog_ready(core)
    error, view = await query(bus, subjects.CORE_CATALOG_AGENTS_GET, {"id": "implementer"})
    assert error is None
    assert view["revision"] == 3


async def _prepared(bus: Bus, run_id: str, **fields: Any) -> RunPrepared:
    await bus.publish(
        subjects.run_event(run_id, RunEvent.REQUESTED),
        RunRequested(agent_id="implementer", **fields),
    )
    events = await eventually(
        lambda: run_events(bus, run_id),
        lambda evs: any(d.address.event == RunEvent.PREPARED for d in evs),
    )
    prepared = next(d.event for d in events if d.address.event == RunEvent.PREPARED)
    assert isinstance(prepared, RunPrepared)
    return prepared


async def _decisions(bus: Bus) -> list[CanaryDecided]:
    return [d.event async for d in bus.replay(CATALOG) if isinstance(d.event, CanaryDecided)]


async def _history(bus: Bus) -> list[dict[str, Any]]:
    error, body = await query(
        bus, subjects.CORE_CATALOG_HISTORY, {"kind": "agent", "id": "implementer"}
    )
    assert error is None
    return list(body["revisions"])


async def _split(bus: Bus, prefix: str) -> dict[str, list[str]]:
    """Request RUNS runs; the run ids of each arm."""
    arms: dict[str, list[str]] = {"candidate": [], "current": []}
    for i in range(RUNS):
        run_id = f"{prefix}-{i}"
        config = (await _prepared(bus, run_id)).config
        assert config.canary is not None
        arm = config.canary.arm
        assert (config.canary.candidate_revision, config.canary.current_revision) == (2, 3)
        assert (arm == "candidate") == (canary_draw(run_id) < 0.5)  # fixed by the run id
        revision = 2 if arm == "candidate" else 3
        assert config.catalog_revisions == {"agent/implementer": revision}
        prompt = "You implement tasks, carefully." if arm == "candidate" else "You implement tasks."
        assert config.system_prompt == prompt
        arms[arm].append(run_id)
    # Binomial(20, 0.5): P(fewer than 3 or more than 17 candidates) = 2 * 211 / 2**20 < 0.05%.
    assert 3 <= len(arms["candidate"]) <= RUNS - 3
    return arms


async def _finish(bus: Bus, run_ids: list[str], ok: bool) -> None:
    for run_id in run_ids:
        name, event = (
            (RunEvent.COMPLETED, RunCompleted(cost_usd=0.1))
            if ok
            else (RunEvent.FAILED, RunFailed(reason="runner_error", message="boom"))
        )
        await bus.publish(subjects.run_event(run_id, name), event, msg_id=uuid.uuid4().hex)


async def test_canary_splits_runs_and_promotes_once(
    bus: Bus, core: CoreApp, core_pool: asyncpg.Pool[Any]
):
    await _agent_with_canary(bus, core)
    arms = await _split(bus, "c")
    error, view = await query(bus, subjects.CORE_CATALOG_AGENTS_GET, {"id": "implementer"})
    assert error is None
    assert view["canary"]["share"] == 0.5
    assert view["canary"]["decision"] is None

    await _finish(bus, arms["candidate"] + arms["current"], ok=True)
    history = await eventually(lambda: _history(bus), lambda h: len(h) == 4)
    promoted = history[3]["definition"]
    assert promoted == history[1]["definition"]  # the candidate's definition, no canary
    assert promoted["canary"] is None
    await asyncio.sleep(2.5)  # another look of the decider: nothing more
    decisions = await _decisions(bus)
    assert len(decisions) == 1
    decided = decisions[0]
    assert (decided.decision, decided.candidate_revision, decided.current_revision) == (
        "promote",
        2,
        3,
    )
    # Decided as soon as both arms had min_runs finished runs, while the rest were ending.
    assert 3 <= decided.candidate.runs <= len(arms["candidate"])
    assert 3 <= decided.current.runs <= len(arms["current"])
    assert decided.candidate.success_rate == 1.0
    assert decided.candidate.mean_cost_usd == 0.1
    assert "max_success_drop 0" in decided.rule
    assert len(await _history(bus)) == 4
    await catalog_ready(core)
    error, agents = await query(bus, subjects.CORE_CATALOG_AGENTS_LIST)
    assert error is None
    (shown,) = agents["agents"]
    assert shown["revision"] == 4
    assert (shown["canary"]["decision"], shown["canary"]["rule"]) == ("promote", decided.rule)
    # A second decider (a new leader, say) judging revision 3 again publishes duplicates only,
    # and counts nothing; the first counted its decision.
    reader = InMemoryMetricReader()
    metrics = RunMetrics(None, MeterProvider(metric_readers=[reader]))  # type: ignore[arg-type]
    again = CanaryRunner(bus, core_pool, core.catalog, metrics=metrics)
    revision_3 = await core.catalog.get_agent("implementer", 3)
    assert revision_3 is not None
    repeat = await again.check(revision_3)
    assert repeat is not None
    assert repeat.decision == "promote"
    assert len(await _decisions(bus)) == 1
    assert len(await _history(bus)) == 4
    assert "nexus.canary.decisions" not in points(reader)
    metrics.canary_decided("implementer", "promote")
    assert value(points(reader), "nexus.canary.decisions", decision="promote") == 1
    after = await _prepared(bus, "c-after")
    assert after.config.canary is None
    assert after.config.system_prompt == "You implement tasks, carefully."


async def test_canary_rolls_back_when_the_candidate_fails(bus: Bus, core: CoreApp):
    await _agent_with_canary(bus, core)
    arms = await _split(bus, "rb")
    # A run pinned to a revision (what the lab and evals ask for) gets no arm.
    pinned = await _prepared(bus, "rb-pinned", agent_revision=3)
    assert pinned.config.canary is None
    assert pinned.config.catalog_revisions == {"agent/implementer": 3}
    await _finish(bus, arms["current"], ok=True)
    await _finish(bus, arms["candidate"], ok=False)
    history = await eventually(lambda: _history(bus), lambda h: len(h) == 4)
    assert history[3]["definition"] == history[0]["definition"]  # the current one, no canary
    (decided,) = await _decisions(bus)
    assert decided.decision == "rollback"
    assert decided.candidate.success_rate == 0.0
    assert decided.current.success_rate == 1.0
    assert "rollback_when" in decided.rule


async def test_a_canary_on_a_missing_revision_or_itself_is_refused(bus: Bus, core: CoreApp):
    await apply_agent(bus, AGENT)
    await apply_agent(bus, AGENT + CANARY.replace("revision: 2", "revision: 9"))  # missing
    await apply_agent(bus, AGENT + CANARY)  # revision 2 would be this apply itself
    await catalog_ready(core)
    assert [r["revision"] for r in await _history(bus)] == [1]
    await apply_agent(bus, CANDIDATE)
    await apply_agent(bus, AGENT + CANARY)  # revision 2 exists now
    await catalog_ready(core)
    history = await _history(bus)
    assert [r["revision"] for r in history] == [1, 2, 3]
    assert history[2]["definition"]["canary"]["revision"] == 2
