"""The fake OpenAI-compatible server against the openai client's models (openai-python's
``ChatCompletion``, ``ChatCompletionChunk``, ``CreateEmbeddingResponse``) and the API
reference's chat completion, chunk and error objects: every field the real API always sends is
there, nothing the models do not know (but the documented ``reasoning_content`` extension) is.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.fakes.openai_server import Failure, FakeOpenAI, Reply, ToolCall
from tests.fakes_contract.shapes import missing, unknown_fields

# What api.openai.com always sends (null where it has nothing), per object.
COMPLETION = ("id", "object", "created", "model", "choices", "usage", "system_fingerprint",
              "service_tier")  # fmt: skip
CHOICE = ("index", "message", "finish_reason", "logprobs")
MESSAGE = ("role", "content", "refusal", "annotations")
USAGE = ("prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
         "completion_tokens_details")  # fmt: skip
CHUNK = ("id", "object", "created", "model", "choices", "system_fingerprint", "service_tier")
CHUNK_CHOICE = ("index", "delta", "finish_reason", "logprobs")
ERROR = ("message", "type", "param", "code")
BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
# Not OpenAI's: the field vLLM and DeepSeek stream reasoning in, which the runner reads.
EXTENSIONS = {"reasoning_content"}


async def _post(llm: FakeOpenAI, body: dict[str, object]) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{llm.base_url}/chat/completions", json=body) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


async def test_completion_is_a_chat_completion_with_every_field() -> None:
    call = ToolCall("read_file", {"path": "a"}, id="call_1")
    async with FakeOpenAI([Reply(text="hi", tool_calls=(call,))]) as llm:
        status, headers, raw = await _post(llm, BODY)
    assert status == 200
    assert "x-request-id" in {k.lower() for k in headers}
    data = json.loads(raw)
    parsed = ChatCompletion.model_validate(data)
    assert unknown_fields(parsed) == []
    choice, usage = data["choices"][0], data["usage"]
    assert missing(data, COMPLETION) == []
    assert missing(choice, CHOICE, "choice.") == []
    assert missing(choice["message"], MESSAGE, "message.") == []
    assert missing(usage, USAGE, "usage.") == []
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "read_file"


async def test_stream_frames_are_chunks_with_every_field_then_done() -> None:
    call = ToolCall("read_file", {"path": "a"}, id="call_1")
    reply = Reply(text="hello world", tool_calls=(call,), reasoning="hmm", chunk_size=4)
    async with FakeOpenAI([reply]) as llm:
        body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
        status, headers, raw = await _post(llm, body)
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    events = raw.decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    frames = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(e.startswith("data: ") for e in events[:-2])
    for frame in frames:
        chunk = ChatCompletionChunk.model_validate(frame)
        assert set(unknown_fields(chunk)) <= {f"choices.0.delta.{x}" for x in EXTENSIONS}
        assert missing(frame, (*CHUNK, "usage")) == []
        for choice in frame["choices"]:
            assert missing(choice, CHUNK_CHOICE, "choice.") == []
    # With include_usage every chunk carries "usage": null but the last, whose choices are [].
    assert [f["usage"] is None for f in frames] == [True] * (len(frames) - 1) + [False]
    assert frames[-1]["choices"] == []
    assert missing(frames[-1]["usage"], USAGE, "usage.") == []
    heads = [tc for f in frames[:-1] for tc in f["choices"][0]["delta"].get("tool_calls") or []]
    assert heads[0]["function"] == {"name": "read_file", "arguments": ""}
    assert frames[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}


async def test_stream_without_include_usage_sends_no_usage_key() -> None:
    async with FakeOpenAI([Reply(text="hi")]) as llm:
        _, _, raw = await _post(llm, {**BODY, "stream": True})
    frames = [json.loads(e.removeprefix("data: ")) for e in raw.decode().split("\n\n")[:-2]]
    assert all("usage" not in f for f in frames)


@pytest.mark.parametrize(
    ("status", "kind", "code", "exc"),
    [
        (429, "requests", "rate_limit_exceeded", openai.RateLimitError),
        (500, "server_error", None, openai.InternalServerError),
        (503, "server_error", None, openai.InternalServerError),
        (400, "invalid_request_error", None, openai.BadRequestError),
    ],
)
async def test_errors_have_the_documented_error_object(
    status: int, kind: str, code: str | None, exc: type[openai.APIStatusError]
) -> None:
    async with FakeOpenAI([Failure(status, retry_after=1)]) as llm:
        got, _, raw = await _post(llm, BODY)
        client = AsyncOpenAI(api_key="k", base_url=llm.base_url, max_retries=0)
        llm.add(Failure(status))
        with pytest.raises(exc) as caught:
            await client.chat.completions.create(**BODY)
        await client.close()
    assert got == status
    error = json.loads(raw)["error"]
    assert missing(error, ERROR) == []
    assert (error["type"], error["code"], error["param"]) == (kind, code, None)
    assert caught.value.type == kind
    assert caught.value.code == code


async def test_a_request_without_messages_is_a_400_like_openai() -> None:
    async with FakeOpenAI([Reply(text="never")]) as llm:
        status, _, raw = await _post(llm, {"model": "m"})
    assert status == 400
    error = json.loads(raw)["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "messages")
    assert llm.requests == [{"model": "m"}]


async def test_embeddings_are_a_create_embedding_response() -> None:
    async with FakeOpenAI() as llm:
        client = AsyncOpenAI(api_key="k", base_url=llm.base_url, max_retries=0)
        raw = await client.embeddings.with_raw_response.create(model="e", input=["a", "b"])
        await client.close()
    data = json.loads(raw.http_response.content)
    parsed = CreateEmbeddingResponse.model_validate(data)
    assert unknown_fields(parsed) == []
    assert [e.index for e in parsed.data] == [0, 1]
