"""Waits (timer, signal, webhook, timeout), typed outputs, expression errors, resume and
flows requested on the `new` subject."""

from __future__ import annotations

from typing import Any

from nexus_events.contract import subjects
from nexus_events.events import RunRequested, WebhookReceived
from nexus_events.events.flows import FlowRequested, FlowResumeRequested, FlowSignal
from nexus_testing import eventually

from .conftest import EnvFactory
from .harness import flow, get_flow, request_flow, wait_status


def wait_flow(flow_id: str, wait: dict[str, Any]) -> Any:
    return flow(
        {
            "id": flow_id,
            "steps": [
                {"id": "hold", "kind": "wait", **wait},
                {"id": "go", "kind": "run", "agent": "a", "input": "{{ hold.payload }}"},
            ],
        }
    )


def done(run_id: str, req: RunRequested) -> Any:
    return {"ok": True}


# Longer than any test runs: only the engine's clock moving fires these waits.
HOUR = 3600.0


async def test_timer_wait_resumes_when_due(make_env: EnvFactory) -> None:
    env = await make_env([wait_flow("timed", {"timer": HOUR})], done)
    await request_flow(env.bus, "w1", "timed")
    await wait_status(env.bus, "w1", "waiting")
    env.clock.advance(HOUR + 60)
    view = await wait_status(env.bus, "w1", "completed")
    assert view.outputs["hold"] == {"by": "timer", "payload": None}


async def test_event_wait_resumes_on_a_signal_with_its_correlation(make_env: EnvFactory) -> None:
    env = await make_env(
        [wait_flow("signalled", {"event": {"correlation": "deploy-{{ task.id }}"}})], done
    )
    await request_flow(env.bus, "w2", "signalled", task_id="T7")
    await wait_status(env.bus, "w2", "waiting")
    await env.bus.publish(
        subjects.flow_event("w2", "signal"), FlowSignal(correlation_id="deploy-T6", payload="no")
    )
    await env.bus.publish(
        subjects.flow_event("w2", "signal"), FlowSignal(correlation_id="deploy-T7", payload="yes")
    )
    view = await wait_status(env.bus, "w2", "completed")
    assert view.outputs["hold"] == {"by": "event", "payload": "yes"}
    assert env.runner.requests["w2-go-r1"].input == "yes"


async def test_event_wait_resumes_on_a_matching_webhook(make_env: EnvFactory) -> None:
    wait = {
        "event": {
            "source": "ci",
            "correlation": "{{ task.id }}",
            "key": "payload.ref",
            "when": 'payload.state == "green"',
        }
    }
    env = await make_env([wait_flow("hooked", wait)], done)
    await request_flow(env.bus, "w3", "hooked", task_id="T8")
    await wait_status(env.bus, "w3", "waiting")
    for n, payload in enumerate(
        [{"ref": "T8", "state": "red"}, {"ref": "T9", "state": "green"}, {"nothing": 1},
         {"ref": "T8", "state": "green"}]
    ):  # fmt: skip
        await env.bus.publish(
            subjects.channel_event("ci", "webhook"),
            WebhookReceived(source="ci", delivery_id=f"d{n}", payload=payload),
        )
    view = await wait_status(env.bus, "w3", "completed")
    assert view.outputs["hold"]["payload"] == {"ref": "T8", "state": "green"}


async def test_event_wait_times_out(make_env: EnvFactory) -> None:
    env = await make_env(
        [wait_flow("late", {"event": {"correlation": "x"}, "timeout": HOUR})], done
    )
    await request_flow(env.bus, "w4", "late")
    await wait_status(env.bus, "w4", "waiting")
    env.clock.advance(HOUR + 60)
    view = await wait_status(env.bus, "w4", "failed")
    assert view.reason == "wait_timeout"
    assert env.runner.requests == {}


def typed_flow() -> Any:
    return flow(
        {
            "id": "typed",
            "steps": [
                {"id": "judge", "kind": "run", "agent": "judge",
                 "output_schema": {"type": "object", "required": ["verdict"],
                                   "properties": {"verdict": {"enum": ["yes", "no"]}}},
                 "next": [{"when": 'judge.verdict == "yes"', "to": "end"}]},
                {"id": "fix", "kind": "run", "agent": "fixer", "input": "{{ judge.nothing }}"},
            ],
        }
    )  # fmt: skip


async def test_invalid_output_fails_the_flow_without_routing(make_env: EnvFactory) -> None:
    env = await make_env([typed_flow()], lambda run_id, req: {"verdict": "maybe"})
    await request_flow(env.bus, "t1", "typed")
    view = await wait_status(env.bus, "t1", "failed")
    assert view.reason == "invalid_output"
    assert "verdict" in view.message


async def test_output_must_fit_the_agents_output_schema_too(make_env: EnvFactory) -> None:
    env = await make_env([typed_flow()], lambda run_id, req: {"verdict": "yes"})
    env.runner.agent_schemas["judge"] = {"type": "object", "required": ["score"]}
    await request_flow(env.bus, "t5", "typed")
    view = await wait_status(env.bus, "t5", "failed")
    assert view.reason == "invalid_output"
    assert "agent's output_schema" in view.message
    assert "score" in view.message


async def test_expression_error_fails_the_flow_at_the_step(make_env: EnvFactory) -> None:
    env = await make_env([typed_flow()], lambda run_id, req: {"verdict": "no"})
    await request_flow(env.bus, "t2", "typed")
    view = await wait_status(env.bus, "t2", "failed")
    assert view.reason == "expression_error"  # fix's input reads a key judge does not give
    assert "judge.nothing" in view.message
    assert list(env.runner.requests) == ["t2-judge-r1"]


async def test_resume_runs_the_failed_step_again_in_a_new_round(make_env: EnvFactory) -> None:
    outcomes = iter([("fail", "tool_error"), {"verdict": "yes"}])
    env = await make_env([typed_flow()], lambda run_id, req: next(outcomes))
    await request_flow(env.bus, "t4", "typed")
    view = await wait_status(env.bus, "t4", "failed")
    assert view.reason == "step_failed"
    await env.bus.publish(
        subjects.flow_event("t4", "resume_requested"), FlowResumeRequested(requested_by="erin")
    )
    view = await wait_status(env.bus, "t4", "completed")
    assert [(s.step, s.round, s.status) for s in view.steps] == [
        ("judge", 1, "failed"),
        ("judge", 2, "succeeded"),
    ]


async def test_run_failure_fails_the_flow_naming_the_step(make_env: EnvFactory) -> None:
    env = await make_env([typed_flow()], lambda run_id, req: ("fail", "budget_exceeded"))
    await request_flow(env.bus, "t3", "typed")
    view = await wait_status(env.bus, "t3", "failed")
    assert view.reason == "step_failed"
    assert "judge" in view.message
    assert "budget_exceeded" in view.message


async def test_new_subject_gets_a_generated_id(make_env: EnvFactory) -> None:
    env = await make_env([typed_flow()], lambda run_id, req: {"verdict": "yes"})
    await env.bus.publish(
        subjects.flow_event(subjects.NEW_RUN_TOKEN, "requested"), FlowRequested(flow="typed")
    )
    run_id = await eventually(lambda: list(env.runner.requests), what="a run requested")
    fid = env.runner.requests[run_id[0]].labels["flow_run_id"]
    assert fid.startswith("flow-")
    await wait_status(env.bus, fid, "completed")
    assert await get_flow(env.bus, "new") is None
