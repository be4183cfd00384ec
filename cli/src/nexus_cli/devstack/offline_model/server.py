"""The HTTP side of the offline model: chat completions (JSON or server-sent events), models."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from .conversation import SCRIPTS, reply_for
from .replies import Reply

MODEL_NAME = "nexus-offline"


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class Server:
    """The HTTP side: a small HTTP/1.1 server (keep-alive, chunked SSE) on asyncio."""

    def __init__(self, chunk_size: int = 12, chunk_delay: float = 0.004) -> None:
        self.chunk_size = chunk_size
        self.chunk_delay = chunk_delay
        self.requests = 0
        self._ids = itertools.count(1)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = [*lines[0].split(" ", 2), "", ""][:3]
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                key, value = line.split(":", 1)
                headers[key.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        raw = await reader.readexactly(length) if length else b""
        keep = headers.get("connection", "").lower() != "close"
        path = path.split("?", 1)[0].rstrip("/")
        if method == "GET" and path in {"/v1/models", "/models"}:
            now = int(time.time())
            models = [{"id": MODEL_NAME, "object": "model", "created": now, "owned_by": "nexus"}]
            await self._json(writer, 200, {"object": "list", "data": models}, keep)
        elif method == "GET" and path == "/healthz":
            await self._json(writer, 200, {"status": "ok"}, keep)
        elif method == "POST" and path in {"/v1/chat/completions", "/chat/completions"}:
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                await self._error(writer, 400, "the body is not JSON", keep)
                return keep
            self.requests += 1
            reply = reply_for(body)
            if body.get("stream"):
                await self._stream(writer, body, reply)
            else:
                await self._json(writer, 200, self._completion(body, reply), keep)
        else:
            await self._error(writer, 404, f"no route {method} {path}", keep)
        return keep

    async def _send_head(
        self, writer: asyncio.StreamWriter, status: int, headers: dict[str, str]
    ) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
        lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers.items())]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    async def _json(
        self, writer: asyncio.StreamWriter, status: int, payload: Any, keep: bool
    ) -> None:
        data = json.dumps(payload).encode()
        await self._send_head(
            writer,
            status,
            {
                "Content-Type": "application/json",
                "Content-Length": str(len(data)),
                "Connection": "keep-alive" if keep else "close",
            },
        )
        writer.write(data)
        await writer.drain()

    async def _error(
        self, writer: asyncio.StreamWriter, status: int, text: str, keep: bool
    ) -> None:
        error = {"message": text, "type": "invalid_request_error", "code": str(status)}
        await self._json(writer, status, {"error": error}, keep)

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, int]:
        prompt = _tokens(json.dumps(body.get("messages") or []))
        completion = _tokens(reply.text + "".join(json.dumps(c.arguments) for c in reply.calls))
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _call_id(self) -> str:
        return f"call_{next(self._ids):06d}"

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.calls:
            message["tool_calls"] = [
                {
                    "id": self._call_id(),
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in reply.calls
            ]
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or MODEL_NAME,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.calls else "stop",
                }
            ],
            "usage": self._usage(body, reply),
        }

    async def _stream(
        self, writer: asyncio.StreamWriter, body: dict[str, Any], reply: Reply
    ) -> None:
        await self._send_head(
            writer,
            200,
            {
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "Transfer-Encoding": "chunked",
                "Connection": "keep-alive",
            },
        )
        chunk_id = f"chatcmpl-{next(self._ids)}"
        model = body.get("model") or MODEL_NAME
        created = int(time.time())

        async def send(data: str) -> None:
            payload = f"data: {data}\n\n".encode()
            writer.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            await writer.drain()
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)  # pacing, so the stream looks live

        def frame(delta: dict[str, Any], finish: str | None = None) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return json.dumps(
                {
                    "id": chunk_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [choice],
                }
            )

        size = self.chunk_size
        await send(frame({"role": "assistant", "content": ""}))
        for i in range(0, len(reply.text), size):
            await send(frame({"content": reply.text[i : i + size]}))
        for index, call in enumerate(reply.calls):
            head = {"index": index, "id": self._call_id(), "type": "function"}
            await send(frame({"tool_calls": [{**head, "function": {"name": call.name}}]}))
            args = json.dumps(call.arguments)
            for i in range(0, len(args), size * 4):
                piece = {"index": index, "function": {"arguments": args[i : i + size * 4]}}
                await send(frame({"tool_calls": [piece]}))
        await send(frame({}, "tool_calls" if reply.calls else "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = json.loads(frame({}))
            usage["choices"] = []
            usage["usage"] = self._usage(body, reply)
            await send(json.dumps(usage))
        await send("[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def serve(host: str, port: int, port_file: Path | None) -> None:
    server = Server()
    srv = await asyncio.start_server(server.handle, host, port)
    bound = srv.sockets[0].getsockname()[1]
    if port_file is not None:
        tmp = port_file.with_suffix(".tmp")
        tmp.write_text(str(bound))
        tmp.replace(port_file)
    sys.stdout.write(f"offline model server on http://{host}:{bound}/v1 (scripts: ")
    sys.stdout.write(", ".join(SCRIPTS) + ")\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with srv:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Offline scripted OpenAI-compatible server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port.")
    parser.add_argument("--port-file", type=Path, help="Write the bound port here.")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.port_file))
