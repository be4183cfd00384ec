"""`QuietFetch`: timeouts are empty fetches; a real failure is one warning line, paced."""

from __future__ import annotations

import logging
import time
from typing import Any

import nats.errors
import nats.js.errors
import pytest
from nexus_events.transport.quiet_fetch import QuietFetch


def failing(*errors: BaseException) -> Any:
    queue = list(errors)

    async def fetch(batch: int, timeout: float | None, heartbeat: float | None) -> list[Any]:  # noqa: ASYNC109
        raise queue.pop(0)

    return fetch


async def test_timeouts_of_either_kind_are_empty_fetches(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG, logger="nexus_events.transport.quiet_fetch")
    fetch = QuietFetch(failing(TimeoutError(), nats.errors.TimeoutError()), "d1")
    assert await fetch(10, 0.01) == []
    assert await fetch(10, 0.01) == []
    assert fetch.idle == 2
    assert caplog.records == []


async def test_a_real_failure_logs_one_line_per_distinct_error_and_waits(
    caplog: pytest.LogCaptureFixture,
):
    deleted = nats.js.errors.APIError(code=400, description="consumer deleted")
    other = nats.errors.NoRespondersError()
    # Whatever level an earlier test left on the root logger, warnings here are emitted.
    caplog.set_level(logging.WARNING, logger="nexus_events.transport.quiet_fetch")
    fetch = QuietFetch(failing(deleted, deleted, deleted, other), "d2")
    started = time.monotonic()
    for _ in range(4):
        assert await fetch(10, 0.05) == []
    # Each failure waits the fetch timeout before the caller asks again: no hot loop.
    assert time.monotonic() - started >= 4 * 0.05
    lines = [r for r in caplog.records if r.name == "nexus_events.transport.quiet_fetch"]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.WARNING]
    assert all("d2" in r.getMessage() and r.exc_info is None for r in lines)
    assert fetch.failures == 4


async def test_a_closed_connection_passes_through():
    fetch = QuietFetch(failing(nats.errors.ConnectionClosedError()), "d3")
    with pytest.raises(nats.errors.ConnectionClosedError):
        await fetch(10, 0.01)
