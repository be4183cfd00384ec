"""Runner overhead per turn: the nexus runner and the OpenAI Agents SDK runner vs a bare
openai-client loop, all against the same fake model in one run.

All three drive the same scripted conversation against the same fake OpenAI-compatible
server (streamed replies, one cheap `list_files` tool call per turn, then `finish`). The bare
loop streams, gathers the tool call and answers it inline; the nexus runner also judges the
call, publishes turn, tool_called and tool_result events (pipelined, every one acked by
JetStream before the run's terminal event), logs and heartbeats; the `openai-agents` runner
(chat-completions model, tracing off, streamed) does its own item bookkeeping, tool
dispatch and stream events. Each timing starts before the contender creates its OpenAI
client (the nexus runner makes its own per run) and ends when its run is done. The
difference per turn is each runner's own overhead (aim for the nexus runner: under 2 ms
beyond the bare loop).

The nexus runner runs twice: alone (`budget_reservations` off), and as deployed, each model
call reserved first, a NATS responder standing in for the spend service and granting at once
(so the figure is the runner's side of the reservation's round trip, without the spend
service's PostgreSQL transaction).
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg
from nexus_events.contract import subjects
from nexus_events.contract.streams import ensure_streams
from nexus_events.events.runs import RunCompleted, RunConfig
from nexus_events.events.spend import SpendDecision, SpendVerdict
from nexus_events.transport.bus import Bus, BusSettings
from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_runner.tools.args import FinishArgs, ListFilesArgs
from openai import AsyncOpenAI

from tests.fakes.openai_server import FakeOpenAI, Reply, Step, ToolCall

TURNS = 40
SHORT = 10
ROUNDS = 5


def _script(turns: int) -> Any:
    counter = itertools.count(1)

    def step(body: dict[str, Any]) -> Step:
        n = next(counter)
        if n >= turns:
            return Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),))
        return Reply(text="ok", tool_calls=(ToolCall("list_files", {"pattern": f"*{n}"}),))

    return step


async def _bare(base_url: str, turns: int, *, wire_body: bool = False) -> float:
    """The loop with nothing but the openai client. `wire_body`: hand messages and tools to
    the SDK in `extra_body`, as the nexus runner does (the same bytes on the wire, without the
    SDK's per-request walk of the conversation)."""
    started = time.perf_counter()
    client = AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0)
    # The same request the runner sends: its tool schemas, a system prompt, the task.
    tools = [
        {"type": "function", "function": {
            "name": name, "description": (model.__doc__ or "").strip(),
            "parameters": model.model_json_schema(),
        }}
        for name, model in (("list_files", ListFilesArgs), ("finish", FinishArgs))
    ]  # fmt: skip
    messages: list[Any] = [
        {"role": "system", "content": "bench"},
        {"role": "user", "content": "go"},
    ]
    for _ in range(turns):
        body: dict[str, Any] = {"messages": messages, "tools": tools}
        if wire_body:
            body = {"messages": [], "tools": [], "extra_body": body}
        stream = await client.chat.completions.create(
            model="m",
            **body,
            stream=True,
            stream_options={"include_usage": True},
            temperature=0.2,
            max_tokens=4096,
        )
        calls: dict[int, dict[str, str]] = {}
        async for chunk in stream:
            for choice in chunk.choices:
                for tc in choice.delta.tool_calls or []:
                    call = calls.setdefault(tc.index, {"id": "", "name": "", "args": ""})
                    call["id"] = tc.id or call["id"]
                    if tc.function is not None:
                        call["name"] = tc.function.name or call["name"]
                        call["args"] += tc.function.arguments or ""
        for call in calls.values():
            messages.append({"role": "assistant", "content": "ok", "tool_calls": [
                {"id": call["id"], "type": "function",
                 "function": {"name": call["name"], "arguments": call["args"]}}
            ]})  # fmt: skip
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "(no files)"})
            json.loads(call["args"])
    elapsed = time.perf_counter() - started
    await client.close()
    return elapsed / turns


async def _runner(base_url: str, nats_url: str, turns: int, *, reserved: bool = False) -> float:
    """A whole run; `reserved`: each model call reserved first (`budget_reservations`
    enforce, as deployed), answered granted at once by a NATS responder standing in for the
    spend service (its PostgreSQL transaction left out: the runner's side of the round trip)."""
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-runner"), source="runner")
    await ensure_streams(bus.js)
    responder = None
    if reserved:
        granted = SpendVerdict(decision=SpendDecision.GRANTED).model_dump_json().encode()

        async def grant(msg: Msg) -> None:
            await msg.respond(granted)

        responder = await bus.nc.subscribe(f"{subjects.SPEND_RESERVE_PREFIX}.*", cb=grant)
    with tempfile.TemporaryDirectory() as tmp:
        settings = RunnerSettings(
            workspace_root=Path(tmp),
            stuck_idle_turns=turns + 10,
            heartbeat_interval=1.0,
            budget_reservations="enforce" if reserved else "off",
        )
        config = RunConfig.model_validate(
            {
                "run_id": f"bench-{uuid.uuid4().hex[:8]}",
                "agent_id": "bench",
                "system_prompt": "bench",
                "input": "go",
                "model": {"name": "m", "base_url": base_url},
                "tools": ["list_files", "finish"],
                "budgets": {"max_turns": turns + 10},
            }
        )
        started = time.perf_counter()
        terminal = await execute_run(config, settings, bus)
        elapsed = time.perf_counter() - started
    if responder is not None:
        await responder.unsubscribe()
    await bus.close()
    assert isinstance(terminal, RunCompleted), terminal
    return elapsed / turns


async def _bare_wire(base_url: str, turns: int) -> float:
    return await _bare(base_url, turns, wire_body=True)


async def _runner_at(nats_url: str, base_url: str, turns: int) -> float:
    return await _runner(base_url, nats_url, turns)


async def _reserved_at(nats_url: str, base_url: str, turns: int) -> float:
    return await _runner(base_url, nats_url, turns, reserved=True)


async def _agents(base_url: str, turns: int) -> float:
    """The same task through the `openai-agents` Runner (streamed, chat-completions API)."""
    from agents import (
        Agent,
        ModelSettings,
        Runner,
        StopAtTools,
        function_tool,
        set_default_openai_api,
        set_default_openai_client,
        set_tracing_disabled,
    )

    started = time.perf_counter()
    client = AsyncOpenAI(api_key="x", base_url=base_url, max_retries=0)
    set_default_openai_client(client, use_for_tracing=False)
    set_default_openai_api("chat_completions")
    set_tracing_disabled(True)

    @function_tool
    def list_files(pattern: str = "*") -> str:
        """List files of the workspace matching a glob pattern."""
        return "(no files)"

    @function_tool
    def finish(summary: str) -> str:
        """Finish the run with a summary of what was done."""
        return summary

    agent: Agent[None] = Agent(
        name="bench",
        instructions="bench",
        model="m",
        tools=[list_files, finish],
        model_settings=ModelSettings(temperature=0.2, max_tokens=4096, include_usage=True),
        tool_use_behavior=StopAtTools(stop_at_tool_names=["finish"]),
    )
    result = Runner.run_streamed(agent, "go", max_turns=turns + 10)
    async for _ in result.stream_events():
        pass
    elapsed = time.perf_counter() - started
    await client.close()
    assert result.final_output == "done", result.final_output
    return elapsed / turns


async def run(nats_url: str) -> list[tuple[str, float, str, float]]:
    # Warm up the client, the server, the nexus runner and the Agents SDK (imports, tool
    # schemas) first; then interleave the three contenders for ROUNDS rounds and keep each
    # one's median, so a noisy moment on the machine does not land on one of them only.
    # Each starts after a full garbage collection: none pays for the one before's garbage.
    async with FakeOpenAI(default=_script(20)) as llm:
        await _bare(llm.base_url, 20)
    async with FakeOpenAI(default=_script(20)) as llm:
        await _runner(llm.base_url, nats_url, 20)
    async with FakeOpenAI(default=_script(20)) as llm:
        await _agents(llm.base_url, 20)
    samples: dict[str, list[float]] = {
        "bare": [], "wire": [], "nexus": [], "agents": [], "reserved": []
    }  # fmt: skip
    # The same runs at SHORT turns too: the difference per extra turn is each contender's
    # marginal cost of a turn, free of what it pays once per run (client, workspace, git).
    marginal: dict[str, list[float]] = {k: [] for k in samples}
    contenders: dict[str, Callable[[str, int], Awaitable[float]]] = {
        "bare": _bare,
        "wire": _bare_wire,
        "nexus": functools.partial(_runner_at, nats_url),
        "agents": _agents,
        "reserved": functools.partial(_reserved_at, nats_url),
    }
    for _ in range(ROUNDS):
        for name, contender in contenders.items():
            per_turn = {}
            for n in (TURNS, SHORT):
                async with FakeOpenAI(default=_script(n)) as llm:
                    gc.collect()
                    per_turn[n] = await contender(llm.base_url, n)
            samples[name].append(per_turn[TURNS])
            marginal[name].append(
                (per_turn[TURNS] * TURNS - per_turn[SHORT] * SHORT) / (TURNS - SHORT)
            )
    bare, wire, nexus, agents, reserved = (statistics.median(samples[k]) * 1e6 for k in samples)
    m_bare, m_wire, m_nexus, m_agents, m_reserved = (
        statistics.median(marginal[k]) * 1e6 for k in marginal
    )
    return [
        ("bare openai-client loop, us/turn", bare, "", 0.0),
        ("bare loop, runner's request path (extra_body), us/turn", wire, "bare loop", wire / bare),
        ("nexus runner, us/turn", nexus, "bare loop", nexus / bare),
        ("openai-agents runner, us/turn", agents, "bare loop", agents / bare),
        ("nexus runner vs openai-agents, us/turn", nexus, "openai-agents", nexus / agents),
        ("nexus runner overhead beyond bare loop, us/turn", nexus - bare, "", 0.0),
        ("openai-agents overhead beyond bare loop, us/turn", agents - bare, "", 0.0),
        # The runner's own work: against a bare loop sending the same requests the same way.
        ("nexus runner overhead beyond bare extra_body loop, us/turn", nexus - wire, "", 0.0),
        (f"marginal turn ({SHORT}->{TURNS} turns): bare loop, us", m_bare, "", 0.0),
        ("marginal turn: bare extra_body loop, us", m_wire, "bare loop", m_wire / m_bare),
        ("marginal turn: nexus runner, us", m_nexus, "bare loop", m_nexus / m_bare),
        ("marginal turn: openai-agents, us", m_agents, "bare loop", m_agents / m_bare),
        ("marginal overhead per turn: nexus runner vs bare extra_body loop, us",
         m_nexus - m_wire, "", 0.0),
        # As deployed: every call reserved first (a responder grants at once).
        ("nexus runner, calls reserved, us/turn", reserved, "nexus runner", reserved / nexus),
        ("marginal turn: nexus runner, calls reserved, us", m_reserved, "bare loop",
         m_reserved / m_bare),
        ("marginal overhead per turn: reserved runner vs bare extra_body loop, us",
         m_reserved - m_wire, "", 0.0),
    ]  # fmt: skip
