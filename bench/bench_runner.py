"""Runner overhead per turn: the nexus runner vs a bare openai-client loop, same fake model.

Both drive the same scripted conversation against the same fake OpenAI-compatible server
(streamed replies, one cheap `list_files` tool call per turn). The bare loop streams, gathers
the tool call and answers it inline; the runner also judges the call, publishes turn,
tool_called and tool_result events (acked by JetStream), logs and heartbeats. The
difference per turn is the runner's own overhead (aim: under 2 ms).
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from nexus_events.bus import Bus, BusSettings
from nexus_events.events.runs import RunCompleted, RunConfig
from nexus_events.streams import ensure_streams
from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_runner.tools.args import FinishArgs, ListFilesArgs
from openai import AsyncOpenAI

from tests.fakes.openai_server import FakeOpenAI, Reply, Step, ToolCall

TURNS = 40


def _script(turns: int) -> Any:
    counter = itertools.count(1)

    def step(body: dict[str, Any]) -> Step:
        n = next(counter)
        if n >= turns:
            return Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),))
        return Reply(text="ok", tool_calls=(ToolCall("list_files", {"pattern": f"*{n}"}),))

    return step


async def _bare(base_url: str, turns: int) -> float:
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
    started = time.perf_counter()
    for _ in range(turns):
        stream = await client.chat.completions.create(
            model="m",
            messages=messages,
            tools=tools,  # type: ignore[arg-type]
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


async def _runner(base_url: str, nats_url: str, turns: int) -> float:
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-runner"), source="runner")
    await ensure_streams(bus.js)
    with tempfile.TemporaryDirectory() as tmp:
        settings = RunnerSettings(
            workspace_root=Path(tmp), stuck_idle_turns=turns + 10, heartbeat_interval=1.0
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
    await bus.close()
    assert isinstance(terminal, RunCompleted), terminal
    return elapsed / turns


async def run(nats_url: str) -> list[tuple[str, float, str, float]]:
    async with FakeOpenAI(default=_script(TURNS)) as llm:
        await _bare(llm.base_url, 20)  # warm up the client and the server
        bare = await _bare(llm.base_url, TURNS)
    async with FakeOpenAI(default=_script(TURNS)) as llm:
        runner = await _runner(llm.base_url, nats_url, TURNS)
    bare_us, runner_us = bare * 1e6, runner * 1e6
    return [
        ("bare openai-client loop, us/turn", bare_us, "", 0.0),
        ("nexus runner, us/turn", runner_us, "bare loop", runner_us / bare_us),
        ("runner overhead beyond bare loop, us/turn", runner_us - bare_us, "", 0.0),
    ]
