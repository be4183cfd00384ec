"""Admission on a real NATS: limits, queue order, restart, two replicas."""

from __future__ import annotations

from nexus_events.events import (
    RunCompleted,
    RunDispatched,
    RunHeartbeat,
    RunQueued,
    RunStarted,
    TerminalEvent,
)
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_scheduler.runtime.base import RuntimeState, RuntimeStatus

from tests.support.noop_runtime import NoopRuntime

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, publish, publish_prepared, run_events


async def dispatched_ids(bus: Bus) -> list[str]:
    return [rid for rid, _ in await run_events(bus, "dispatched")]


def max_active(events: list[tuple[str, object]]) -> int:
    active: set[str] = set()
    peak = 0
    for rid, ev in events:
        if isinstance(ev, RunDispatched):
            active.add(rid)
        elif isinstance(ev, TerminalEvent):
            active.discard(rid)
        peak = max(peak, len(active))
    return peak


async def test_limits_hold_under_200_prepared_runs_and_dispatch_is_fifo(
    make_app: AppFactory, bus: Bus
) -> None:
    runtime = NoopRuntime()
    await make_app(runtime, max_concurrent_runs=10)
    ids = [f"run-{i:03}" for i in range(200)]
    await publish_prepared(bus, [config(r, agent_id=f"agent-{i % 3}") for i, r in enumerate(ids)])

    async def n_dispatched(n: int) -> list[str] | None:
        got = await dispatched_ids(bus)
        assert len(got) <= n, f"more than {n} dispatched: {len(got)}"
        return got if len(got) == n else None

    first = await eventually(lambda: n_dispatched(10), what="10 dispatched")
    assert first == ids[:10]
    queued = await eventually(lambda: _at_least(run_events(bus, "queued"), 190), what="190 queued")
    assert [rid for rid, _ in queued] == ids[10:]
    assert [ev.position for _, ev in queued if isinstance(ev, RunQueued)] == list(range(1, 191))

    # Complete the active runs wave by wave; each wave frees exactly 10 slots.
    done = 0
    while done < 200:
        wave = ids[done : done + 10]
        for rid in wave:
            await publish(bus, rid, RunCompleted())
        done += 10
        if done < 200:
            got = await eventually(lambda d=done: n_dispatched(d + 10), what=f"{done + 10}")
            assert got == ids[: done + 10]
    assert max_active(await run_events(bus)) == 10
    assert sorted(runtime.started) == ids
    assert len(runtime.started) == len(set(runtime.started))


async def _at_least(coro: object, n: int) -> list | None:  # type: ignore[type-arg]
    got = await coro  # type: ignore[misc]
    return got if len(got) >= n else None


async def test_per_agent_and_per_task_limits(make_app: AppFactory, bus: Bus) -> None:
    await make_app(
        max_concurrent_runs=None,
        max_runs_per_agent=2,
        agent_limits={"reviewer": 1},
        max_runs_per_task=1,
    )
    await publish_prepared(
        bus,
        [
            config("i1", "implementer"),
            config("i2", "implementer"),
            config("i3", "implementer"),
            config("r1", "reviewer"),
            config("r2", "reviewer"),
            config("t1", "tester", task_id="task-1"),
            config("t2", "tester", task_id="task-1"),
        ],
    )

    async def settled() -> bool:
        return len(await run_events(bus, "dispatched")) == 4 and (
            len(await run_events(bus, "queued")) == 3
        )

    await eventually(settled, what="4 dispatched, 3 queued")
    assert sorted(await dispatched_ids(bus)) == ["i1", "i2", "r1", "t1"]
    limits = {rid: ev.limit for rid, ev in await run_events(bus, "queued")}  # type: ignore[attr-defined]
    assert limits == {"i3": "agent", "r2": "agent", "t2": "task"}


async def test_agent_definition_limit_from_run_config(make_app: AppFactory, bus: Bus) -> None:
    """`max_concurrent_runs` of the agent definition (copied into RunConfig by core) limits
    the agent; a settings override for the agent wins over it."""
    await make_app(max_concurrent_runs=None, agent_limits={"tester": 2})
    await publish_prepared(
        bus,
        [config(f"d{i}", "designer", max_concurrent_runs=1) for i in range(3)]
        + [config(f"t{i}", "tester", max_concurrent_runs=1) for i in range(3)],
    )

    async def settled() -> bool:
        return len(await run_events(bus, "dispatched")) == 3 and (
            len(await run_events(bus, "queued")) == 3
        )

    await eventually(settled, what="3 dispatched, 3 queued")
    assert sorted(await dispatched_ids(bus)) == ["d0", "t0", "t1"]
    queued = {rid: ev.limit for rid, ev in await run_events(bus, "queued")}  # type: ignore[attr-defined]
    assert queued == {"d1": "agent", "d2": "agent", "t2": "agent"}
    await publish(bus, "d0", RunCompleted())
    await eventually(lambda: _has(bus, "d1", "dispatched"), what="d1 dispatched")
    assert "d2" not in await dispatched_ids(bus)


async def test_restart_keeps_queued_runs_and_limits_and_loses_dead_runs(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    first = await make_app(NoopRuntime(), max_concurrent_runs=2)
    await publish_prepared(bus, [config(f"r{i}") for i in range(5)])
    await eventually(lambda: _at_least(run_events(bus, "queued"), 3), what="3 queued")
    await eventually(lambda: _at_least(run_events(bus, "dispatched"), 2), what="2 dispatched")
    await publish(bus, "r0", RunStarted())
    await publish(bus, "r1", RunStarted())
    await first.stop()

    # The new scheduler's runtime still has r0 alive; r1's process is gone. r1 is not lost
    # at once (a restart is no proof its runner died) but once the heartbeat window passed.
    runtime = NoopRuntime()
    runtime.states["r0"] = RuntimeStatus(RuntimeState.RUNNING)
    second = await make_app(runtime, max_concurrent_runs=2)
    assert second.service is not None
    svc = second.service
    await svc.tick()
    assert await run_events(bus, "lost") == []
    clock.advance(60)
    await publish(bus, "r0", RunHeartbeat(seq=1))
    await eventually(lambda: _true(svc.state.runs["r0"].last_seen == clock.now()), what="beat")
    clock.advance(60)
    await svc.tick()

    async def r1_lost_and_r2_dispatched() -> bool:
        names = {(rid, ev.event_name) for rid, ev in await run_events(bus)}
        return ("r1", "lost") in names and ("r2", "dispatched") in names

    await eventually(r1_lost_and_r2_dispatched, what="r1 lost, r2 dispatched")
    [(_, lost)] = [(r, e) for r, e in await run_events(bus, "lost")]
    assert lost.reason in ("runtime_gone", "heartbeat_missing")  # type: ignore[attr-defined]
    assert runtime.started == ["r2"]  # r0 is not started again
    assert second.service.state.active_total == 2
    assert second.service.state.queue() == ["r3", "r4"]
    await publish(bus, "r0", RunCompleted())
    await eventually(lambda: _has(bus, "r3", "dispatched"), what="r3 dispatched")
    assert max_active(await run_events(bus)) == 2


async def _has(bus: Bus, run_id: str, name: str) -> bool:
    return any(rid == run_id and e.event_name == name for rid, e in await run_events(bus))


async def test_two_replicas_never_start_a_run_twice(make_app: AppFactory, bus: Bus) -> None:
    # One runtime shared like a cluster; `start_calls` records every start either replica makes.
    cluster = NoopRuntime()
    app_a = await make_app(cluster, max_concurrent_runs=5)
    app_b = await make_app(cluster, max_concurrent_runs=5, wait_leading=False)
    ids = [f"run-{i:02}" for i in range(30)]
    await publish_prepared(bus, [config(r) for r in ids])
    await eventually(lambda: _at_least(run_events(bus, "dispatched"), 5), what="5 dispatched")
    assert app_a.leading.is_set()
    assert not app_b.leading.is_set()
    assert app_b.service is None

    # Hand over mid-stream: the standby takes the lease and carries on from the stream.
    completed: set[str] = set()
    for rid in ids[:5]:
        await publish(bus, rid, RunCompleted())
        completed.add(rid)
    await app_a.stop()
    await eventually(lambda: _true(app_b.leading.is_set()), what="standby takes over")

    async def newly_dispatched() -> list[str]:
        return [r for r in await dispatched_ids(bus) if r not in completed]

    while len(completed) < 30:
        for rid in await eventually(newly_dispatched, what=f"more after {len(completed)}"):
            await publish(bus, rid, RunCompleted())
            completed.add(rid)
    dispatched = await dispatched_ids(bus)
    assert sorted(dispatched) == ids
    assert len(dispatched) == len(set(dispatched))
    assert sorted(cluster.start_calls) == ids  # no replica ever started a run twice
    assert await run_events(bus, "lost") == []
    assert max_active(await run_events(bus)) == 5


async def _true(value: bool) -> bool:
    return value
