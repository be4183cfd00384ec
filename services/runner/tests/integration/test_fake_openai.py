"""The fake OpenAI server speaks the real client's protocol: JSON, SSE, tool calls, errors."""

from __future__ import annotations

import json

import openai
import pytest
from openai import AsyncOpenAI
from tests.fakes.openai_server import Failure, FakeOpenAI, Reply, ToolCall


async def test_json_completion_with_usage() -> None:
    async with FakeOpenAI([Reply(text="hello", prompt_tokens=7, completion_tokens=3)]) as llm:
        client = AsyncOpenAI(api_key="k", base_url=llm.base_url, max_retries=0)
        resp = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        await client.close()
    assert resp.choices[0].message.content == "hello"
    assert resp.usage is not None
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (7, 3)
    assert llm.requests[0]["messages"][0]["content"] == "hi"


async def test_streaming_text_and_tool_call_deltas() -> None:
    call = ToolCall("read_file", {"path": "a.txt"}, id="call_x")
    async with FakeOpenAI([Reply(text="let me look", tool_calls=(call,), chunk_size=3)]) as llm:
        client = AsyncOpenAI(api_key="k", base_url=llm.base_url, max_retries=0)
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text, args, names, finish, usage = "", "", [], None, None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for tc in choice.delta.tool_calls or []:
                    if tc.function and tc.function.name:
                        names.append((tc.id, tc.function.name))
                    if tc.function and tc.function.arguments:
                        args += tc.function.arguments
                finish = choice.finish_reason or finish
        await client.close()
    assert text == "let me look"
    assert names == [("call_x", "read_file")]
    assert json.loads(args) == {"path": "a.txt"}
    assert finish == "tool_calls"
    assert usage is not None
    assert usage.total_tokens == 15


async def test_rate_limit_carries_retry_after_and_server_errors() -> None:
    script = [Failure(429, retry_after=2), Failure(503, message="down"), Reply(text="ok")]
    async with FakeOpenAI(script) as llm:
        client = AsyncOpenAI(api_key="k", base_url=llm.base_url, max_retries=0)
        with pytest.raises(openai.RateLimitError) as rate:
            await client.chat.completions.create(model="m", messages=[])
        assert rate.value.response.headers["retry-after"] == "2"
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="m", messages=[])
        resp = await client.chat.completions.create(model="m", messages=[])
        await client.close()
    assert resp.choices[0].message.content == "ok"
    assert llm.failures_sent == 2


async def test_script_steps_can_depend_on_the_request() -> None:
    def echo(body: dict[str, object]) -> Reply:
        return Reply(text=f"{len(body['messages'])} messages")  # type: ignore[arg-type]

    async with FakeOpenAI(default=echo) as llm:
        client = AsyncOpenAI(api_key="k", base_url=llm.base_url, max_retries=0)
        resp = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a"}] * 3
        )
        await client.close()
    assert resp.choices[0].message.content == "3 messages"


@pytest.mark.parametrize("stream", [False, True])
async def test_runner_requests_are_the_bodies_the_sdk_would_send(stream: bool) -> None:
    """The runner hands messages and tools to the SDK in `extra_body` (skipping the SDK's
    per-request walk of the conversation); the server must get the very same body."""
    from nexus_runner.llm import LlmClient, RetryPolicy

    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "a"}'}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "ünïcode ✓"},
    ]  # fmt: skip
    tools = [
        {"type": "function", "function": {
            "name": "read_file", "description": "Read.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        }}
    ]  # fmt: skip
    async with FakeOpenAI([Reply(text="a"), Reply(text="b")]) as llm:
        client = AsyncOpenAI(api_key="k", base_url=llm.base_url, max_retries=0)
        typed: dict = {"model": "m", "messages": messages, "tools": tools, "temperature": 0.2}
        typed["max_tokens"] = 99
        if stream:
            typed.update(stream=True, stream_options={"include_usage": True})
            async for _ in await client.chat.completions.create(**typed):
                pass
        else:
            await client.chat.completions.create(**typed)
        runner = LlmClient(
            client, "m", temperature=0.2, max_output_tokens=99,
            retry=RetryPolicy(1, 0.0, 0.0), stream=stream,
        )  # fmt: skip

        async def sink(kind: str, text: str) -> None:
            return None

        await runner.complete(messages, tools, sink)
        await client.close()
    sdk_body, runner_body = llm.requests
    assert runner_body == sdk_body
    assert list(runner_body) == list(sdk_body)  # same keys in the same order
