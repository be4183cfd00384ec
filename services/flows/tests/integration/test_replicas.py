"""Two flows replicas on one NATS and one PostgreSQL: the holder of the flows lease alone
projects, runs the engine and the bridges (it decides), the standby holds none of them but
answers queries, and a clean stop of the leader hands over at once."""

from __future__ import annotations

import time

from nexus_testing import eventually

from .conftest import EnvFactory
from .harness import feature_flow, request_flow, start_app, stored_requests, wait_status
from .test_feature_flow import reviewer_asks_once


async def test_one_replica_decides_and_a_clean_stop_hands_over_at_once(
    make_env: EnvFactory,
) -> None:
    env = await make_env([feature_flow()], reviewer_asks_once())
    first = env.app
    second = await start_app(env.bus, env.pool)
    env.app = second  # the fixture stops it; the first is stopped below
    try:
        assert first.leadership is not None
        assert second.leadership is not None
        assert (first.leadership.role, second.leadership.role) == ("leader", "standby")
        assert second.leadership.status().holder == first.leadership.holder
        assert first.engine is not None
        assert first.runner is not None
        assert len(first.consumers) == 3
        assert (second.engine, second.runner, second.consumers) == (None, None, [])
        assert first.ready()
        assert second.ready()  # a standby is ready to take over
        await request_flow(env.bus, "f1", "feature", input="x")
        await wait_status(env.bus, "f1", "completed")
        assert (second.engine, second.runner) == (None, None)  # it never decided

        started = time.monotonic()
        await first.stop()
        # The TTL is 10 s: only the deleted key explains a takeover this quick.
        await eventually(lambda: second.leadership.role, lambda r: r == "leader", within=5)
        assert time.monotonic() - started < 5
        assert second.engine is not None
        await request_flow(env.bus, "f2", "feature", input="y")
        await wait_status(env.bus, "f2", "completed")
    finally:
        if first._running:
            await first.stop()
    # Each step's run was requested once across both leaders.
    assert set((await stored_requests(env.bus)).values()) == {1}
    assert len(env.runner.started) == len(set(env.runner.started)) == 12
