"""Run assembly end to end on real NATS + PostgreSQL: requested -> prepared | failed."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import DLQ, RUNS
from nexus_events.events import DeadLetter, MemoryItem, MemorySearchReply, RunFailed, RunPrepared
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_skill

from nexus_core.app import CoreApp

from .support import AGENT_YAML, SKILL_MD, catalog_ready, event_names, eventually, run_events

RAW = {"agent_id": "implementer", "task_id": "T-1", "input": "fix the bug"}


async def _raw(bus: Bus, run_id: str, body: dict[str, Any] | bytes) -> None:
    """Publish like `nats pub` does: no headers at all."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    await bus.js.publish(subjects.run_event(run_id, "requested"), data)


async def _setup(bus: Bus, core: CoreApp) -> None:
    await apply_agent(bus, AGENT_YAML)
    await apply_skill(bus, SKILL_MD)
    await catalog_ready(core)


async def _outcome(bus: Bus, run_id: str) -> Any:
    events = await eventually(
        lambda: run_events(bus, run_id),
        lambda evs: any(d.address.event in ("prepared", "failed") for d in evs),
    )
    return next(d for d in events if d.address.event in ("prepared", "failed"))


async def test_raw_request_is_prepared_with_the_full_config(bus: Bus, core: CoreApp):
    await _setup(bus, core)
    await _raw(bus, "r1", RAW)
    outcome = await _outcome(bus, "r1")
    assert isinstance(outcome.event, RunPrepared)
    config = outcome.event.config
    assert (config.run_id, config.agent_id, config.task_id, config.input) == (
        "r1",
        "implementer",
        "T-1",
        "fix the bug",
    )
    assert [s.name for s in config.skills] == ["python"]
    assert config.memory.status == "unavailable"  # no memory service running
    assert config.catalog_revisions == {"agent/implementer": 1, "skill/python": 1}
    assert outcome.envelope.event_id == "core:prepared:r1"
    assert outcome.envelope.causation_id == "NEXUS_RUNS:" + str(outcome.envelope.stream_seq - 1)


async def test_memory_context_and_timeout(bus: Bus, core: CoreApp):
    await _setup(bus, core)
    seen = []

    async def answer(msg: Any) -> None:
        seen.append(json.loads(msg.data))
        reply = MemorySearchReply(items=[MemoryItem(memory_id="m1", text="uses uv")])
        await msg.respond(reply.model_dump_json().encode())

    sub = await bus.nc.subscribe(subjects.MEMORY_SEARCH, cb=answer)
    await _raw(bus, "r-mem", RAW)
    outcome = await _outcome(bus, "r-mem")
    await sub.unsubscribe()
    assert outcome.event.config.memory.status == "ok"
    assert [m.text for m in outcome.event.config.memory.items] == ["uses uv"]
    assert seen[0]["scopes"] == ["agent-implementer", "task-T-1", "global"]

    silent = await bus.nc.subscribe(subjects.MEMORY_SEARCH, cb=_ignore)
    await _raw(bus, "r-slow", RAW)
    outcome = await _outcome(bus, "r-slow")
    await silent.unsubscribe()
    assert outcome.event.config.memory.status == "timeout"


async def _ignore(msg: Any) -> None:
    """A memory service that never answers."""


async def core_consumers_idle(bus: Bus) -> None:
    """Until every durable on NEXUS_RUNS has nothing pending or unacknowledged."""

    async def idle() -> bool:
        infos = await bus.js.consumers_info(RUNS)
        durables = [i for i in infos if i.config.durable_name is not None]
        return all(not (i.num_pending or i.num_ack_pending) for i in durables)

    await eventually(idle, what="core's NEXUS_RUNS consumers idle")


async def test_unknown_agent_unknown_skill_then_consumer_goes_on(bus: Bus, core: CoreApp):
    await _setup(bus, core)
    await _raw(bus, "r-ghost", {"agent_id": "ghost"})
    await apply_agent(
        bus,
        AGENT_YAML.replace("id: implementer", "id: needy").replace(
            "skills: [python]", "skills: [python@9, missing]"
        ),
    )
    await catalog_ready(core)
    await _raw(bus, "r-needy", {"agent_id": "needy"})
    bad = await bus.js.publish(subjects.run_event("r-bad", "requested"), b"{not json")
    bad2 = await bus.js.publish(subjects.run_event("r-bad2", "requested"), b'{"agent": "x"}')
    await _raw(bus, "r-ok", RAW)

    ghost = await _outcome(bus, "r-ghost")
    assert isinstance(ghost.event, RunFailed)
    assert ghost.event.reason == "unknown_agent"
    needy = await _outcome(bus, "r-needy")
    assert isinstance(needy.event, RunFailed)
    assert needy.event.reason == "unknown_skill"
    assert needy.event.detail["skills"] == ["python@9", "missing"]
    assert isinstance((await _outcome(bus, "r-ok")).event, RunPrepared)

    async def letters() -> list[DeadLetter]:
        return [DeadLetter.model_validate_json(m.data) async for m in bus.replay_raw(DLQ)]

    def of_bad(ls: list[DeadLetter]) -> dict[int | None, str]:
        return {x.stream_seq: x.reason for x in ls if x.stream_seq in (bad.seq, bad2.seq)}

    await eventually(letters, lambda ls: len(of_bad(ls)) == 2)
    # Core's other consumers of NEXUS_RUNS reject them too (after the assembly or before):
    # one letter per stored message, whichever consumer filed it first.
    await core_consumers_idle(bus)
    dead = await letters()
    assert of_bad(dead) == {bad.seq: "undecodable", bad2.seq: "invalid_event"}
    assert set(Counter((x.stream, x.stream_seq) for x in dead).values()) == {1}


async def test_redelivery_duplicate_and_conflict(bus: Bus, core: CoreApp):
    await _setup(bus, core)
    await _raw(bus, "r-dup", RAW)
    await _outcome(bus, "r-dup")
    await _raw(bus, "r-dup", RAW)  # same body again: a duplicate, nothing new
    await _raw(bus, "r-dup", {**RAW, "input": "something else"})  # a conflict
    conflict_events = await eventually(lambda: _conflict_runs(bus), lambda runs: len(runs) == 1)
    run_id, failed = conflict_events[0]
    assert run_id.startswith("r-dup-conflict-")
    assert failed.reason == "run_id_conflict"
    assert failed.detail["conflicts_with"] == "r-dup"
    assert await event_names(bus, "r-dup") == ["requested", "prepared", "requested", "requested"]


async def _conflict_runs(bus: Bus) -> list[tuple[str, Any]]:
    from nexus_events.contract.streams import RUNS

    out = []
    async for d in bus.replay(RUNS, filter_subject=subjects.run_events_filter(None, "failed")):
        if d.address.run_id and "-conflict-" in d.address.run_id:
            out.append((d.address.run_id, d.event))
    return out


async def test_new_token_gets_a_generated_run_id(bus: Bus, core: CoreApp):
    await _setup(bus, core)
    await _raw(bus, subjects.NEW_RUN_TOKEN, RAW)
    from nexus_events.contract.streams import RUNS

    async def prepared() -> list[Any]:
        f = subjects.run_events_filter(None, "prepared")
        return [d async for d in bus.replay(RUNS, filter_subject=f)]

    found = await eventually(prepared, lambda ps: len(ps) == 1)
    run_id = found[0].address.run_id
    assert run_id.startswith("run-")
    assert found[0].event.config.run_id == run_id
    assert await event_names(bus, run_id) == ["requested", "prepared"]


async def test_a_request_waits_for_an_agent_the_catalog_has_not_applied_yet(
    bus: Bus, core: CoreApp
):
    await _setup(bus, core)
    runner = core.catalog_runner
    assert runner is not None
    # The catalog projection lags: it applies nothing until released.
    gate = asyncio.Event()
    apply = runner.handle

    async def lagging(*args: Any) -> None:
        await gate.wait()
        await apply(*args)

    runner.handle = lagging  # type: ignore[method-assign]
    waiting = asyncio.Event()
    wait_until = runner.wait_until

    async def noticed(*args: Any, **kwargs: Any) -> None:
        waiting.set()
        await wait_until(*args, **kwargs)

    runner.wait_until = noticed  # type: ignore[method-assign]
    await apply_agent(bus, AGENT_YAML.replace("id: implementer", "id: fresh"))
    await _raw(bus, "r-fresh", {**RAW, "agent_id": "fresh"})
    # Assembly finds no agent `fresh` and waits for the catalog instead of failing the run.
    await asyncio.wait_for(waiting.wait(), 10)
    assert "failed" not in await event_names(bus, "r-fresh")
    gate.set()
    outcome = await _outcome(bus, "r-fresh")
    assert isinstance(outcome.event, RunPrepared)
    assert outcome.event.config.agent_id == "fresh"
