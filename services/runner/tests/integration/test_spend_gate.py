"""The reservation before each model call (docs/spend.md) against a responder on the real NATS
server that answers as the spend service would: granted, stop, wait, silence, cancel, off."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events.runs import (
    CancelRequested,
    Reason,
    RunBudgetPaused,
    RunBudgetResumed,
    RunCancelled,
    RunCompleted,
    RunCondensed,
    RunFailed,
    RunTurn,
)
from nexus_events.events.spend import SpendReserve, SpendVerdict
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import Price, RunnerSettings
from nexus_runner.context import upper_bound
from nexus_runner.tokens import counter_for

from .lab_sources import accepting, lab_config, record
from .spend_responder import SCOPE, STOP_MESSAGE, SpendResponder, granted, stop, wait
from .support import make_config, names, run_events, wait_for


def _call(name: str, **args: Any) -> Reply:
    return Reply(tool_calls=(ToolCall(name, args),))


def _script(turns: int) -> list[Reply]:
    """`turns - 1` calls of list_files, then finish: one model call a turn."""
    return [
        *[_call("list_files", path=".") for _ in range(turns - 1)],
        _call("finish", summary="ok"),
    ]


def _enforcing(settings: RunnerSettings, **extra: Any) -> RunnerSettings:
    update = {
        "budget_reservations": "enforce",
        "budget_retry_seconds": 0.2,
        "acceptance_command": "true",
        **extra,
    }
    return settings.model_copy(update=update)


def _waits_then(count: int, then: SpendVerdict, *, at_turn: int) -> Any:
    """Answer wait `count` times for the call of `at_turn`, then `then`; grant the others."""
    waited = 0

    def answer(request: SpendReserve, before: int) -> SpendVerdict:
        nonlocal waited
        if request.turn != at_turn:
            return granted()
        if waited < count:
            waited += 1
            return wait()
        return then

    return answer


async def test_every_model_call_is_reserved_first_with_its_estimate(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    async with FakeOpenAI(_script(3)) as llm, SpendResponder(bus.nc, llm) as spend:
        config = make_config(llm.base_url)
        terminal = await execute_run(config, _enforcing(settings), runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    assert len(llm.requests) == 3
    assert [a.request.turn for a in spend.asked] == [1, 2, 3]
    assert [a.model_calls for a in spend.asked] == [0, 1, 2]  # each before its call
    assert {a.run_id for a in spend.asked} == {config.run_id}
    assert {a.request.attempt for a in spend.asked} == {1}
    counter = counter_for(config.model.name)
    for asked, sent in zip(spend.asked, llm.requests, strict=True):
        tools = sent.get("tools") or []
        # The bound of what was sent, never below the tokenizer's count.
        prompt = upper_bound(sent["messages"], tools)
        assert prompt >= counter.count(sent["messages"], tools)
        assert asked.request.tokens == prompt + config.model.max_output_tokens
        assert asked.request.cost_usd > 0  # gpt-4o-mini has a default price


async def test_a_stop_at_turn_3_fails_the_run_naming_the_scope_before_the_call(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    def answer(request: SpendReserve, before: int) -> SpendVerdict:
        return stop() if request.turn >= 3 else granted()

    async with FakeOpenAI(_script(5)) as llm, SpendResponder(bus.nc, llm, answer) as spend:
        config = make_config(llm.base_url)
        terminal = await execute_run(config, _enforcing(settings), runner_bus)
    assert isinstance(terminal, RunFailed), terminal
    assert terminal.reason == Reason.BUDGET_EXCEEDED
    assert terminal.message == STOP_MESSAGE
    assert terminal.detail == {
        "budget_id": SCOPE.budget_id,
        "instance": SCOPE.instance,
        "bucket": SCOPE.bucket,
    }
    assert len(llm.requests) == 2  # no third call reached the model
    assert [a.request.turn for a in spend.asked] == [1, 2, 3]


async def test_a_wait_pauses_the_run_until_granted(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    answer = _waits_then(3, granted(), at_turn=2)
    async with FakeOpenAI(_script(3)) as llm, SpendResponder(bus.nc, llm, answer) as spend:
        config = make_config(llm.base_url)
        terminal = await execute_run(config, _enforcing(settings), runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    events = await run_events(bus, config.run_id)
    order = names(events)
    paused = next(e for e in events if isinstance(e, RunBudgetPaused))
    resumed = next(e for e in events if isinstance(e, RunBudgetResumed))
    assert order.count(RunEvent.BUDGET_PAUSED) == 1  # once, however many asks
    assert order.index(RunEvent.BUDGET_PAUSED) < order.index(RunEvent.BUDGET_RESUMED)
    turns = [e for e in events if isinstance(e, RunTurn)]
    assert events.index(resumed) < events.index(turns[1])  # the 2nd call after the grant
    assert (paused.budget_id, paused.instance, paused.bucket) == (
        "alpha-monthly",
        "team:alpha",
        "2026-11",
    )
    assert paused.turn == 2
    assert paused.ask_approval_id == "budget-ask-alpha"
    assert resumed.turn == 2
    assert resumed.budget_id == SCOPE.budget_id
    assert resumed.waited_seconds >= 0.5  # three asks 0.2 s apart
    second = [a for a in spend.asked if a.request.turn == 2]
    assert len(second) == 4
    assert {a.model_calls for a in second} == {1}  # no model call while it waited
    assert len(llm.requests) == 3


async def test_a_wait_then_a_stop_fails_the_run(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    answer = _waits_then(2, stop(), at_turn=2)
    async with FakeOpenAI(_script(3)) as llm, SpendResponder(bus.nc, llm, answer):
        config = make_config(llm.base_url)
        terminal = await execute_run(config, _enforcing(settings), runner_bus)
    assert isinstance(terminal, RunFailed), terminal
    assert terminal.reason == Reason.BUDGET_EXCEEDED
    assert "team:alpha" in terminal.message
    order = names(await run_events(bus, config.run_id))
    assert RunEvent.BUDGET_PAUSED in order
    assert RunEvent.BUDGET_RESUMED not in order
    assert len(llm.requests) == 1


async def test_no_spend_service_means_no_model_call_until_one_answers(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="nexus_runner.spend")
    async with FakeOpenAI(_script(2)) as llm:
        config = make_config(llm.base_url)
        run = asyncio.create_task(execute_run(config, _enforcing(settings), runner_bus))
        await wait_for(bus, config.run_id, RunEvent.STARTED)
        await asyncio.sleep(1.5)  # several asks, 0.2 s apart, nobody answering
        assert llm.requests == []
        assert not run.done()
        silence = [r for r in caplog.records if "not reserved" in r.getMessage()]
        assert len(silence) == 1  # one line a minute, not one an ask
        async with SpendResponder(bus.nc, llm) as spend:
            terminal = await asyncio.wait_for(run, 15)
    assert isinstance(terminal, RunCompleted), terminal
    assert [a.request.turn for a in spend.asked] == [1, 2]
    assert len(llm.requests) == 2


async def test_a_cancel_ends_a_budget_wait_at_once(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    async with FakeOpenAI(_script(2)) as llm, SpendResponder(bus.nc, llm, lambda r, n: wait()):
        config = make_config(llm.base_url)
        slow = _enforcing(settings, budget_retry_seconds=60.0)  # no second ask in this test
        run = asyncio.create_task(execute_run(config, slow, runner_bus))
        await wait_for(bus, config.run_id, RunEvent.BUDGET_PAUSED)
        await bus.publish(
            subjects.run_event(config.run_id, RunEvent.CANCEL_REQUESTED),
            CancelRequested(requested_by="ann"),
        )
        terminal = await asyncio.wait_for(run, 10)
    assert isinstance(terminal, RunCancelled), terminal
    assert terminal.cancelled_by == "ann"
    assert llm.requests == []


async def test_off_asks_nothing(bus: Bus, runner_bus: Bus, settings: RunnerSettings) -> None:
    assert settings.budget_reservations == "off"
    async with FakeOpenAI(_script(2)) as llm, SpendResponder(bus.nc, llm) as spend:
        config = make_config(llm.base_url)
        run_settings = settings.model_copy(update={"acceptance_command": "true"})
        terminal = await execute_run(config, run_settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    assert len(llm.requests) == 2
    assert spend.asked == []


SUMMARY_IN, SUMMARY_OUT = 900, 40


def _long_turns(turns: int) -> Any:
    """Long reasoning with a small, new call each turn (eliding outputs cannot make room, so the
    middle is summarised); a summary request (no tools offered) gets a summary."""
    done = 0

    def step(body: dict[str, Any]) -> Reply:
        nonlocal done
        if not body.get("tools"):
            text = "You listed files many times."
            return Reply(text=text, prompt_tokens=SUMMARY_IN, completion_tokens=SUMMARY_OUT)
        done += 1
        if done >= turns:
            return _call("finish", summary="ok")
        text = f"Turn {done}: " + " ".join(f"thought{done}-{i} on the listing" for i in range(120))
        call = ToolCall("write_file", {"path": f"n{done}.txt", "content": "n\n"}, id=f"c{done}")
        return Reply(text=text, tool_calls=(call,), chunk_size=4_096)

    return step


async def test_a_summary_call_is_reserved_and_its_usage_is_in_condensed(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    model = "offline-spend-test"  # no default price: priced here
    prices = {model: Price(input_per_mtok=1.0, output_per_mtok=2.0)}
    async with FakeOpenAI([]) as llm, SpendResponder(bus.nc, llm) as spend:
        llm.add(*([_long_turns(12)] * 40))
        config = make_config(
            llm.base_url,
            model={
                "name": model,
                "base_url": llm.base_url,
                "context_tokens": 6_000,
                "max_output_tokens": 500,
            },
        )
        run_settings = _enforcing(settings, prices=prices, context_keep_turns=2)
        terminal = await execute_run(config, run_settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    events = await run_events(bus, config.run_id)
    summarised = [
        e for e in events if isinstance(e, RunCondensed) and e.condensation.strategy == "summarise"
    ]
    assert summarised
    for condensed in summarised:
        assert (condensed.llm_tokens_in, condensed.llm_tokens_out) == (SUMMARY_IN, SUMMARY_OUT)
        assert condensed.cost_usd == pytest.approx((SUMMARY_IN * 1.0 + SUMMARY_OUT * 2.0) / 1e6)
    # One reservation per model call, summaries included, each before its call.
    assert [a.model_calls for a in spend.asked] == list(range(len(llm.requests)))
    summaries = [a for a in spend.asked if not llm.requests[a.model_calls].get("tools")]
    assert [a.request.turn for a in summaries] == [e.turn for e in summarised]
    for asked in summaries:
        sent = llm.requests[asked.model_calls]
        prompt = upper_bound(sent["messages"], [])
        assert asked.request.tokens == prompt + run_settings.context_summary_tokens
        assert asked.request.cost_usd > 0


async def test_a_replayed_turn_makes_no_call_and_no_reservation(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    source = await record(runner_bus, settings, remote)
    async with FakeOpenAI() as llm, SpendResponder(bus.nc, llm) as spend:
        replay = lab_config(source, llm.base_url, mode="replay")
        terminal = await execute_run(replay, _enforcing(accepting(settings)), runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    assert llm.requests == []
    assert spend.asked == []
    replayed = await run_events(bus, replay.run_id)
    assert sum(isinstance(e, RunTurn) and e.replayed for e in replayed) == 4


async def test_an_unreadable_or_error_reply_is_asked_again_never_taken_for_a_grant(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    replies = [
        (b"not json", None),
        (b'{"error": {"code": 503, "message": "database away"}}', _SERVICE_DOWN),
        (granted().model_dump_json().encode(), None),
        (granted().model_dump_json().encode(), None),
    ]
    model_calls: list[int] = []
    async with FakeOpenAI(_script(2)) as llm:

        async def answer(msg: Msg) -> None:
            model_calls.append(len(llm.requests))
            body, headers = replies[min(len(model_calls), len(replies)) - 1]
            # msg.respond sends no headers: an error reply is published to the inbox itself.
            await bus.nc.publish(msg.reply, body, headers=headers)

        sub = await bus.nc.subscribe(subjects.SPEND_RESERVE, cb=answer)
        try:
            config = make_config(llm.base_url)
            terminal = await execute_run(config, _enforcing(settings), runner_bus)
        finally:
            await sub.unsubscribe()
    assert isinstance(terminal, RunCompleted), terminal
    assert model_calls == [0, 0, 0, 1]  # the call waited for the grant, the 3rd answer
    assert len(llm.requests) == 2


_SERVICE_DOWN = {"Nats-Service-Error": "database away", "Nats-Service-Error-Code": "503"}
