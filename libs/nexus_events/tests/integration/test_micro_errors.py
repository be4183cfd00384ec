"""How a nats.micro endpoint answers a handler's failure, on a real nats-server: a refusal as
its code, NATS failing under the request as a one-line 503 (no traceback in the log), and
any other fault as a logged 500."""

from __future__ import annotations

import logging

import pytest
from nexus_events.errors import BusUnavailable, PullStalled
from nexus_events.transport.bus import Bus
from nexus_events.transport.micro import (
    QueryError,
    endpoint_handler,
    read_reply,
    start_service,
    stop_service,
)
from pydantic import BaseModel


class Ask(BaseModel):
    what: str


async def _answer(ask: Ask) -> dict[str, str]:
    if ask.what == "stall":
        raise PullStalled("409 Consumer Deleted")
    if ask.what == "away":
        raise BusUnavailable("nats: connection closed")
    if ask.what == "refuse":
        raise QueryError(404, "no such thing")
    if ask.what == "bug":
        raise RuntimeError("a bug")
    return {"echo": ask.what}


async def _ask(bus: Bus, what: str) -> tuple[str | None, str]:
    reply = read_reply(await bus.nc.request("micro-test.ask", f'{{"what": "{what}"}}'.encode()))
    return reply.error_code, reply.message or str(reply.data)


@pytest.fixture
async def served(bus: Bus):
    handler = endpoint_handler(Ask, _answer, service="micro-test")
    service = await start_service(
        bus.nc, "micro-test", "errors", [("ask", "micro-test.ask", handler)]
    )
    try:
        yield bus
    finally:
        await stop_service(service)


async def test_the_bus_failing_under_a_request_is_a_one_line_503(served: Bus, caplog):
    caplog.set_level(logging.WARNING, logger="nexus_events.transport.micro")
    for what in ("stall", "away"):
        code, message = await _ask(served, what)
        assert code == "503", (what, code, message)
        assert "retry" in message
        assert "\n" not in message
    records = [r for r in caplog.records if r.name == "nexus_events.transport.micro"]
    assert len(records) == 2
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in records)


async def test_refusals_keep_their_code_and_faults_are_a_logged_500(served: Bus, caplog):
    caplog.set_level(logging.WARNING, logger="nexus_events.transport.micro")
    assert await _ask(served, "ok") == (None, "{'echo': 'ok'}")
    assert await _ask(served, "refuse") == ("404", "no such thing")
    code, message = await _ask(served, "bug")
    assert code == "500"
    assert "micro-test log" in message
    (record,) = [r for r in caplog.records if r.name == "nexus_events.transport.micro"]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
