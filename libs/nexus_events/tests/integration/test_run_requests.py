"""`request_run` / `request_flow` on a real nats-server: one subject, one message id format,
a repeat stored once, a bad id refused before anything is sent."""

from __future__ import annotations

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.codec import decode
from nexus_events.contract.streams import FLOWS, RUNS
from nexus_events.errors import InvalidSubject
from nexus_events.events import FlowRequested, Origin, RunRequested
from nexus_events.transport.bus import Bus
from nexus_events.transport.run_requests import (
    flow_request,
    request_flow,
    request_msg_id,
    request_run,
    run_request,
)


def _run() -> RunRequested:
    return RunRequested(agent_id="coder", input="fix it", origin=Origin.CLI, requested_by="ann")


def _flow() -> FlowRequested:
    return FlowRequested(flow="review", origin=Origin.PLANE, requested_by="bob")


async def test_a_run_request_is_stored_on_its_subject_with_the_one_message_id(bus: Bus) -> None:
    ack = await request_run(bus, "run-a", _run(), source="cli", correlation_id="corr-1")
    msg = await bus.js.get_last_msg(RUNS, "nexus.agent.run.v1.run-a.requested")
    assert ack.seq == msg.seq
    assert msg.headers is not None
    assert msg.headers["Nats-Msg-Id"] == "cli:run-a:requested"
    assert msg.headers["Nexus-Correlation-Id"] == "corr-1"
    decoded = decode(msg.subject, msg.data, msg.headers)
    assert decoded.event == _run()


async def test_a_flow_request_is_stored_on_its_subject_with_the_one_message_id(bus: Bus) -> None:
    await request_flow(bus, "flow-a", _flow(), source="plane", causation_id="ev-9")
    msg = await bus.js.get_last_msg(FLOWS, "nexus.flow.v1.flow-a.requested")
    assert msg.headers is not None
    assert msg.headers["Nats-Msg-Id"] == "plane:flow-a:requested"
    assert msg.headers["Nexus-Causation-Id"] == "ev-9"


async def test_asking_again_for_the_same_id_is_stored_once(bus: Bus) -> None:
    first = await request_run(bus, "run-twice", _run(), source="schedule")
    again = await request_run(bus, "run-twice", _run(), source="schedule")
    assert again.duplicate
    assert again.seq == first.seq
    flow_first = await request_flow(bus, "flow-twice", _flow(), source="channel")
    flow_again = await request_flow(bus, "flow-twice", _flow(), source="channel")
    assert flow_again.duplicate
    assert flow_again.seq == flow_first.seq


@pytest.mark.parametrize("bad", ["a.b", "has space", "*", ""])
async def test_a_bad_id_is_refused_before_anything_is_sent(bus: Bus, bad: str) -> None:
    before = (await bus.js.stream_info(RUNS)).state.messages
    with pytest.raises(InvalidSubject):
        await request_run(bus, bad, _run(), source="cli")
    with pytest.raises(InvalidSubject):
        await request_flow(bus, bad, _flow(), source="cli")
    assert (await bus.js.stream_info(RUNS)).state.messages == before


def test_the_batch_form_builds_the_same_message() -> None:
    message = run_request("run-b", _run(), source="flowrun", correlation_id="c")
    assert message.subject == subjects.run_event("run-b", RunRequested)
    assert message.msg_id == "flowrun:run-b:requested"
    assert message.correlation_id == "c"
    flow = flow_request("flow-b", _flow(), source="flows")
    assert flow.subject == "nexus.flow.v1.flow-b.requested"
    assert flow.msg_id == "flows:flow-b:requested"


@pytest.mark.parametrize("source", ["a:b", "", "two words"])
def test_a_source_that_would_blur_the_message_id_is_refused(source: str) -> None:
    with pytest.raises(InvalidSubject):
        request_msg_id(source, "run-c")
