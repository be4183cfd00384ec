"""Before a model call is sent, its reservation and the transcript's write-ahead are waited
for at the same time (one round trip's wait, not two), and both are done before it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nexus_events.contract.runstate import RunStatus
from nexus_events.events.runs import Reason
from openai import AsyncOpenAI

from nexus_runner.errors import RunStopped
from nexus_runner.llm import LlmClient, RetryPolicy


def _client(gate: Any) -> LlmClient:
    client = AsyncOpenAI(api_key="x", base_url="http://127.0.0.1:9", max_retries=0)
    return LlmClient(
        client,
        "m",
        temperature=0.0,
        max_output_tokens=10,
        retry=RetryPolicy(1, 0.0, 0.0),
        before_call=gate,
    )


async def test_the_reservation_and_the_write_ahead_overlap() -> None:
    # Each waits for the other to have started: done one after the other, this never ends.
    reserving, flushing = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def gate(model: str, messages: Any, tools: Any, max_tokens: int) -> None:
        reserving.set()
        await flushing.wait()
        order.append("reserved")

    async def ready() -> None:
        flushing.set()
        await reserving.wait()
        order.append("flushed")

    await asyncio.wait_for(_client(gate)._before_send([], [], ready), 5)
    assert sorted(order) == ["flushed", "reserved"]


async def test_a_stop_from_the_reservation_comes_after_the_write_ahead() -> None:
    flushed: list[bool] = []

    async def gate(model: str, messages: Any, tools: Any, max_tokens: int) -> None:
        raise RunStopped(RunStatus.FAILED, Reason.BUDGET_EXCEEDED, "no budget")

    async def ready() -> None:
        await asyncio.sleep(0.01)
        flushed.append(True)

    with pytest.raises(RunStopped, match="no budget"):
        await _client(gate)._before_send([], [], ready)
    assert flushed == [True]


async def test_a_failed_write_ahead_cancels_the_reservation_and_raises() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def gate(model: str, messages: Any, tools: Any, max_tokens: int) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def ready() -> None:
        await started.wait()
        raise OSError("transcript not stored")

    with pytest.raises(OSError, match="transcript not stored"):
        await asyncio.wait_for(_client(gate)._before_send([], [], ready), 5)
    assert cancelled.is_set()


async def test_either_alone_is_awaited() -> None:
    done: list[str] = []

    async def gate(model: str, messages: Any, tools: Any, max_tokens: int) -> None:
        done.append("reserved")

    async def ready() -> None:
        done.append("flushed")

    await _client(None)._before_send([], [], ready)
    await _client(gate)._before_send([], [], None)
    assert done == ["flushed", "reserved"]
