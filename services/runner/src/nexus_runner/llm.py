"""One model turn over the chat-completions API: streaming, tool-call assembly, retries."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import openai
from openai import AsyncOpenAI

from nexus_runner.errors import LlmUnavailable

# Status codes worth retrying: rate limits, timeouts, conflicts and server errors.
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})

DeltaSink = Callable[[str, str], Awaitable[None]]  # (stream kind, text)
# Awaited before each call (not each retry) with (model, messages, tools, max output tokens):
# the budget reservation (nexus_runner.spend); it may raise `RunStopped`.
CallGate = Callable[[str, list[dict[str, Any]], list[dict[str, Any]], int], Awaitable[None]]


@dataclass
class ToolCallRequest:
    id: str
    name: str
    arguments: str = ""


@dataclass
class Completion:
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    finish_reason: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    model: str | None = None
    duration_ms: int = 0
    attempts: int = 1
    replayed: bool = False  # served from a replay's recording (nexus_runner.lab.replaying)

    def assistant_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        return message


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    base_delay: float
    max_delay: float

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds before attempt `attempt + 1`: Retry-After if the server said, else backoff."""
        if retry_after is not None:
            return float(min(max(retry_after, 0.0), self.max_delay))
        backoff: float = self.base_delay * 2.0 ** (attempt - 1)
        return min(backoff, self.max_delay)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value: str | None = exc.response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


class ModelClient(Protocol):
    """What the loop calls for a model turn: `LlmClient`, or a replay's client over it."""

    @property
    def model(self) -> str: ...

    @property
    def retry(self) -> RetryPolicy: ...

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_delta: DeltaSink,
        on_retry: Callable[[int, float, str], Awaitable[None]] | None = None,
        ready: Callable[[], Awaitable[None]] | None = None,
    ) -> Completion: ...


class LlmClient:
    """Calls one model; `complete` returns one whole assistant turn or raises `LlmUnavailable`."""

    def __init__(
        self,
        client: AsyncOpenAI,
        model: str,
        *,
        temperature: float,
        max_output_tokens: int,
        retry: RetryPolicy,
        stream: bool = True,
        before_call: CallGate | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self.retry = retry
        self.stream = stream
        self.before_call = before_call

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_delta: DeltaSink,
        on_retry: Callable[[int, float, str], Awaitable[None]] | None = None,
        ready: Callable[[], Awaitable[None]] | None = None,
    ) -> Completion:
        """One whole turn. `ready` (the transcript's write-ahead) is awaited before the call is
        sent, at the same time as the reservation: two round trips waited as one."""
        await self._before_send(messages, tools, ready)
        attempt = 1
        while True:
            started = time.monotonic()
            try:
                completion = await self._once(messages, tools, on_delta)
            except openai.APIStatusError as exc:
                if exc.status_code not in RETRYABLE_STATUS:
                    raise LlmUnavailable(f"model refused the request: {exc}") from exc
                error, delay_hint = f"HTTP {exc.status_code}", _retry_after(exc)
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                error, delay_hint = type(exc).__name__, None
            else:
                completion.duration_ms = int((time.monotonic() - started) * 1000)
                completion.attempts = attempt
                return completion
            if attempt >= self.retry.max_attempts:
                raise LlmUnavailable(f"model unavailable after {attempt} attempts: {error}")
            delay = self.retry.delay(attempt, delay_hint)
            if on_retry is not None:
                await on_retry(attempt, delay, error)
            await asyncio.sleep(delay)
            attempt += 1

    async def _before_send(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        ready: Callable[[], Awaitable[None]] | None,
    ) -> None:
        """The reservation (`before_call`) and `ready`, overlapped; both done, or raises."""
        if self.before_call is None:
            if ready is not None:
                await ready()
            return
        if ready is None:
            await self.before_call(self.model, messages, tools, self.max_output_tokens)
            return
        reserving = asyncio.ensure_future(
            self.before_call(self.model, messages, tools, self.max_output_tokens)
        )
        try:
            await ready()
        except BaseException:
            reserving.cancel()  # no call follows: a reservation in flight is not waited for
            with contextlib.suppress(BaseException):
                await reserving
            raise
        await reserving

    def _params(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        # The SDK walks every request body against its TypedDict graph before sending it: with
        # the whole conversation in it, that walk grew with every turn and was most of a turn's
        # client-side time. Messages and tool schemas here are plain wire-format JSON already,
        # so they travel in `extra_body`, which the SDK merges into the body after the walk;
        # the empty placeholders keep the keys where they were. The body on the wire is the same.
        wire: dict[str, Any] = {"messages": messages}
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [],
            "temperature": self.temperature,
            "max_tokens": self.max_output_tokens,
            "extra_body": wire,
        }
        if tools:
            params["tools"] = []
            wire["tools"] = tools
        return params

    async def _once(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], on_delta: DeltaSink
    ) -> Completion:
        params = self._params(messages, tools)
        if not self.stream:
            resp = await self.client.chat.completions.create(**params)
            choice = resp.choices[0]
            out = Completion(
                text=choice.message.content or "",
                finish_reason=choice.finish_reason,
                model=resp.model,
            )
            for tc in choice.message.tool_calls or []:
                fn = getattr(tc, "function", None)
                if fn is not None:
                    out.tool_calls.append(ToolCallRequest(tc.id, fn.name, fn.arguments or ""))
            if resp.usage is not None:
                out.tokens_in, out.tokens_out = (
                    resp.usage.prompt_tokens,
                    resp.usage.completion_tokens,
                )
            return out
        stream = await self.client.chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}
        )
        out = Completion()
        calls: dict[int, ToolCallRequest] = {}
        async with stream:
            async for chunk in stream:
                out.model = chunk.model or out.model
                if chunk.usage is not None:
                    out.tokens_in = chunk.usage.prompt_tokens
                    out.tokens_out = chunk.usage.completion_tokens
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta.content:
                        out.text += delta.content
                        await on_delta("llm_text", delta.content)
                    reasoning = getattr(delta, "reasoning_content", None)
                    if isinstance(reasoning, str) and reasoning:
                        out.reasoning += reasoning
                        await on_delta("llm_reasoning", reasoning)
                    for tc in delta.tool_calls or []:
                        call = calls.setdefault(tc.index, ToolCallRequest(id="", name=""))
                        call.id = tc.id or call.id
                        if tc.function is not None:
                            call.name = tc.function.name or call.name
                            call.arguments += tc.function.arguments or ""
                    out.finish_reason = choice.finish_reason or out.finish_reason
        out.tool_calls = [calls[i] for i in sorted(calls)]
        for i, call in enumerate(out.tool_calls):
            call.id = call.id or f"call_{i}"
        return out
