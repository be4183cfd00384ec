"""A fake OpenAI-compatible server: ``POST /v1/chat/completions`` (JSON and SSE streaming)
and ``POST /v1/embeddings`` (deterministic trigram vectors).

Mirrors (docs/fakes.md): the openai client's models (``ChatCompletion``, ``ChatCompletionChunk``,
``CreateEmbeddingResponse``) and OpenAI's API reference for what is always sent: a completion's
``system_fingerprint``, ``service_tier``, a choice's ``logprobs``, a message's ``refusal`` and
``annotations``, usage with its ``*_tokens_details``; with ``stream_options.include_usage``
``"usage": null`` on every chunk but the last (whose ``choices`` is empty); SSE ``data:`` frames
ending with ``data: [DONE]``; an ``x-request-id`` header; errors as
``{"error": {"message", "type", "param", "code"}}`` (429: type ``requests``, code
``rate_limit_exceeded``; 5xx: ``server_error``; 400: ``invalid_request_error``). Not OpenAI's
but read by the runner: ``delta.reasoning_content`` (vLLM's and DeepSeek's reasoning stream).
Checked by tests/fakes_contract/test_openai.py.

A test scripts the conversation: each request takes the next `Step` from the script (a
`Reply` with text and/or tool calls and usage, or an `Failure` such as a 429 with
Retry-After or a 503). A step may also be a function of the request body, so a reply can
depend on what the client sent. Every request body is recorded for assertions. The real
``openai`` client talks to it over HTTP.

    async with FakeOpenAI([Reply(text="hi")]) as llm:
        client = AsyncOpenAI(api_key="x", base_url=llm.base_url)
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.http import LocalHttpServer, ServedFake


@dataclass(frozen=True)
class ToolCall:
    """One tool call the fake model makes; `arguments` is sent as JSON text."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """One assistant message. Streamed in `chunk_size` character pieces."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str = ""
    prompt_tokens: int = 10
    completion_tokens: int = 5
    finish_reason: str | None = None  # default: "tool_calls" if any, else "stop"
    chunk_size: int = 8
    # Seconds between streamed chunks; with `hang` the stream stops mid-way and waits.
    chunk_delay: float = 0.0
    hang: bool = False


@dataclass(frozen=True)
class Failure:
    """An HTTP error instead of a reply (429 rate limit, 500/503 server errors...)."""

    status: int = 429
    retry_after: float | None = None
    message: str = "rate limited"


Step = Reply | Failure

# OpenAI's error ``type`` (and ``code``) by status; 4xx not listed are invalid requests.
ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object for `status`."""
    kind, code = ERROR_KINDS.get(
        status, ("server_error", None) if status >= 500 else ("invalid_request_error", None)
    )
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def trigram_vector(text: str, dim: int) -> list[float]:
    """Counts of hashed character trigrams: a cheap, deterministic stand-in for a model."""
    out = [0.0] * dim
    padded = f"  {text.lower()}  "
    for i in range(len(padded) - 2):
        digest = hashlib.blake2b(padded[i : i + 3].encode(), digest_size=4).digest()
        out[int.from_bytes(digest, "big") % dim] += 1.0
    return out


Script = Iterable[Step | Callable[[dict[str, Any]], Step]]


class FakeOpenAI(ServedFake):
    """The fake server. Start with ``async with`` (or `start`/`stop`); read `requests`."""

    def __init__(
        self,
        script: Script = (),
        *,
        default: Step | Callable[[dict[str, Any]], Step] | None = None,
        model: str = "fake-model",
    ) -> None:
        self._script = list(script)
        self.default = default
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.embedding_requests: list[dict[str, Any]] = []
        # Requests to any other path (OpenAI answers them 404): what reached the host besides
        # the API, e.g. a sandboxed tool using the model's host as an exfiltration endpoint.
        self.stray_requests: list[dict[str, str]] = []
        self.failures_sent = 0
        self.hanging = asyncio.Event()  # set when a `hang` reply is waiting
        self.release = asyncio.Event()  # set to let hanging streams finish
        self._ids = itertools.count(1)
        self._http = LocalHttpServer()

    # -- lifecycle -------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_route("*", "/{tail:.*}", self._stray)
        return app

    async def stop(self) -> None:
        self.release.set()  # hanging streams finish before the server closes
        await super().stop()

    @property
    def base_url(self) -> str:
        return f"{self._http.url}/v1"

    def add(self, *steps: Step | Callable[[dict[str, Any]], Step]) -> None:
        """Append steps to the script (tests may extend it while the client runs)."""
        self._script.extend(steps)

    # -- handler ---------------------------------------------------------------------------

    def _next_step(self, body: dict[str, Any]) -> Step:
        if self._script:
            step = self._script.pop(0)
        elif self.default is not None:
            step = self.default
        else:
            return Failure(status=500, message="fake script exhausted")
        return step(body) if callable(step) else step

    async def _stray(self, request: web.Request) -> web.StreamResponse:
        """Any other path: recorded, and a 404 with OpenAI's error body."""
        body = (await request.read()).decode(errors="replace")
        self.stray_requests.append(
            {"method": request.method, "path": request.path_qs, "body": body}
        )
        message = f"Invalid URL ({request.method} {request.path})"
        return web.json_response(error_body(404, message), status=404, headers=self._headers())

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/embeddings``: a deterministic vector per input (hashed character
        trigrams, so similar texts get similar vectors), `dimensions` long (default 64)."""
        body: dict[str, Any] = await request.json()
        self.embedding_requests.append(body)
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        dim = int(body.get("dimensions") or 64)
        data = [
            {"object": "embedding", "index": i, "embedding": trigram_vector(t, dim)}
            for i, t in enumerate(texts)
        ]
        tokens = sum(len(t) // 4 + 1 for t in texts)
        return web.json_response({
            "object": "list", "data": data, "model": body.get("model", self.model),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }, headers=self._headers())  # fmt: skip

    def _headers(self) -> dict[str, str]:
        return {"x-request-id": f"req_{next(self._ids)}"}

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        self.requests.append(body)
        # Missing is a 400 as at OpenAI; an empty list is let through (OpenAI refuses it too,
        # but tests script failures with `messages=[]`).
        for param in ("model", "messages"):
            if param not in body:
                answer = error_body(400, f"Missing required parameter: '{param}'.", param)
                return web.json_response(answer, status=400, headers=self._headers())
        step = self._next_step(body)
        if isinstance(step, Failure):
            self.failures_sent += 1
            headers = self._headers()
            if step.retry_after is not None:
                headers["Retry-After"] = f"{step.retry_after:g}"
            answer = error_body(step.status, step.message)
            return web.json_response(answer, status=step.status, headers=headers)
        if body.get("stream"):
            return await self._stream(request, body, step)
        return web.json_response(self._completion(body, step), headers=self._headers())

    def _usage(self, step: Reply) -> dict[str, Any]:
        reasoning = len(step.reasoning) // 4  # a stand-in count, inside completion_tokens
        return {
            "prompt_tokens": step.prompt_tokens,
            "completion_tokens": step.completion_tokens,
            "total_tokens": step.prompt_tokens + step.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": min(reasoning, step.completion_tokens),
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def _envelope(self, kind: str, ident: str, body: dict[str, Any]) -> dict[str, Any]:
        """The fields every completion and chunk has, in OpenAI's order."""
        return {
            "id": ident,
            "object": kind,
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }

    def _finish(self, step: Reply) -> str:
        return step.finish_reason or ("tool_calls" if step.tool_calls else "stop")

    def _call_ids(self, step: Reply) -> list[str]:
        return [c.id or f"call_{next(self._ids)}" for c in step.tool_calls]

    def _completion(self, body: dict[str, Any], step: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": step.text or None,
            "refusal": None,
            "annotations": [],
        }
        if step.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_json()},
                }
                for c, call_id in zip(step.tool_calls, self._call_ids(step), strict=True)
            ]
        choice = {"index": 0, "message": message, "logprobs": None}
        return {
            **self._envelope("chat.completion", f"chatcmpl-{next(self._ids)}", body),
            "choices": [{**choice, "finish_reason": self._finish(step)}],
            "usage": self._usage(step),
        }

    async def _stream(
        self, request: web.Request, body: dict[str, Any], step: Reply
    ) -> web.StreamResponse:
        headers = {"Content-Type": "text/event-stream; charset=utf-8", **self._headers()}
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        chunk_id = f"chatcmpl-{next(self._ids)}"
        # With include_usage, every chunk says "usage": null until the last one.
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def frame(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            out = {**self._envelope("chat.completion.chunk", chunk_id, body), "choices": [choice]}
            if with_usage:
                out["usage"] = None
            return out

        async def send(payload: dict[str, Any]) -> None:
            await resp.write(f"data: {json.dumps(payload)}\n\n".encode())
            if step.chunk_delay:
                await asyncio.sleep(step.chunk_delay)

        await send(frame({"role": "assistant", "content": "", "refusal": None}))
        size = max(step.chunk_size, 1)
        for i in range(0, len(step.reasoning), size):
            await send(frame({"reasoning_content": step.reasoning[i : i + size]}))
        for i in range(0, len(step.text), size):
            await send(frame({"content": step.text[i : i + size]}))
            if step.hang and i == 0:
                self.hanging.set()
                await self.release.wait()
        if step.hang and not step.text:
            self.hanging.set()
            await self.release.wait()
        for index, (call, call_id) in enumerate(
            zip(step.tool_calls, self._call_ids(step), strict=True)
        ):
            head = {"index": index, "id": call_id, "type": "function"}
            function = {"name": call.name, "arguments": ""}
            await send(frame({"tool_calls": [{**head, "function": function}]}))
            args = call.arguments_json()
            for i in range(0, len(args), size):
                piece = {"index": index, "function": {"arguments": args[i : i + size]}}
                await send(frame({"tool_calls": [piece]}))
        await send(frame({}, self._finish(step)))
        if with_usage:
            usage_frame = frame({})
            usage_frame["choices"] = []
            usage_frame["usage"] = self._usage(step)
            await send(usage_frame)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


__all__ = ["Failure", "FakeOpenAI", "Reply", "Script", "Step", "ToolCall", "error_body"]
