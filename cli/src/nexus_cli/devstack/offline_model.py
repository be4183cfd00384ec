"""An offline, scripted OpenAI-compatible model server for the demo and the end-to-end tests.

    python -m nexus_cli.devstack.offline_model [--host H] [--port P] [--port-file FILE]

It speaks ``POST /v1/chat/completions`` like the real API (JSON, or server-sent events with
``stream: true``: role, content deltas, tool-call deltas with their arguments in pieces, the
finish reason, a usage chunk with ``stream_options.include_usage``, ``data: [DONE]``) and
``GET /v1/models``. It needs nothing but the standard library and no network.

It is stateless: the reply to a request is a function of the conversation it carries (which
script, how many assistant turns so far, what the last tool said), so a restart, a retry or
several runs at once all behave the same. The script is chosen by a keyword anywhere in the
messages, ``[offline-model:NAME]`` (an agent's system prompt or a run's input), else by a model
name ``offline-NAME``, else by the role the system prompt opens with as examples/agents do
(``You are the planner|reviewer|tester ...``: that script), else it is ``fix``:

- ``fix``: fixes examples/demo-repo: list files, read calc.py, run the tests (they fail), edit
  the bug out, run the tests (they pass), finish with a summary. When its input carries the
  reviewer's finding (``REVIEW_FINDING``, as examples/flows/feature.yaml passes it to the next
  round) it also writes the test the reviewer asked for.
- ``steady``: ``fix`` with a few seconds of shell work first (a run that is still going while
  something else happens, e.g. core is restarted).
- ``slow``: a long shell command (``sleep 600``), then finish: a run to cancel.
- ``approval``: one gated ``run_shell`` call, then finish saying whether it was approved.
- ``chat``: no tools: says hello and finishes.
- ``plan``: for a run in plan mode: lists the files, submits a plan with ``exit_plan_mode``;
  once it is approved (the run ends if not), writes PLAN.md and finishes.
- ``planner``: reads the project, finishes with ``details.steps`` (a list of strings).
- ``reviewer``: reads the project, finishes with ``details.verdict``: ``request_changes`` (with
  ``findings: [REVIEW_FINDING]``) in a flow's first round, ``approve`` from the second on. The
  round is read from the step run ids in the conversation (``<flow run>-<step>-r<round>``, in
  the branch it is asked to review and the branch it works on), so it needs no memory: the same
  request always gets the same verdict.
- ``tester``: runs the tests, finishes with ``details.passed`` (whether they passed).
- ``resume``: ten quick turns for the resume chaos test (scripts/chaos_resume.py): writes
  three files, reads each back a few turns later, appends a distinct line to ``journal.log``
  three times (a side effect that must not happen twice), prints the journal, then finishes
  with ``details.seen`` (whether each read found what was written), ``details.journal`` (the
  journal's lines) and ``details.interrupted`` (tool results that said the call was
  interrupted). A resumed attempt that restored the workspace and the conversation finishes
  with the same details.
- ``paced``: ``resume`` with two seconds' sleep in each journal append, so runs started
  together are all still going seconds later (the cluster chaos test kills a NATS node then).

A request from memory's extraction (its instruction carries ``[nexus-memory-extraction]``)
gets JSON naming what the finished run taught: its result summary, in the repository's scope
when the run had one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KEYWORD = re.compile(r"\[offline-model:([a-z_-]+)\]")
# The opening of examples/agents' system prompts: which example agent is asking.
ROLE = re.compile(r"^\s*You are the (planner|reviewer|tester)\b")
# A flow step's run id ends with -r<round>, or -r<round>-i<item> in a map (step_run_id).
ROUND = re.compile(r"[a-z0-9_]-r(\d+)(?:-i\d+)?(?![\w-])")
DEFAULT_SCRIPT = "fix"
MODEL_NAME = "nexus-offline"

# The demo repo's bug and its fix (examples/demo-repo/calc.py).
BUG_FILE = "calc.py"
BUG_OLD = "return a - b  # BUG: should add"
BUG_NEW = "return a + b"
# What the scripted reviewer asks for in round 1, and the test the implementer adds for it.
REVIEW_FINDING = "add() has no test with negative numbers"
NEGATIVE_TEST_FILE = "test_calc_negative.py"
NEGATIVE_TEST = (
    "from calc import add\n\n\ndef test_add_negative() -> None:\n"
    "    assert add(-2, -3) == -5\n    assert add(-2, 3) == 1\n"
)
PLAN_STEPS = [
    "Read calc.py and test_calc.py to find why test_add fails.",
    "Change add() in calc.py to return a + b.",
    "Run the tests and check they all pass.",
]


@dataclass(frozen=True)
class Call:
    """One tool call of a scripted reply."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """One scripted assistant message: some text, then tool calls."""

    text: str = ""
    calls: tuple[Call, ...] = ()


@dataclass(frozen=True)
class Turn:
    """What the model sees of the conversation so far."""

    index: int  # assistant turns already taken
    last_tool: str  # content of the last tool message ("" if none)
    tools: frozenset[str]  # the tools offered in this request
    # The system prompt and the run's input (the messages before the first assistant turn).
    prompt: str = ""
    # Every answered tool call so far, in order: (tool, arguments, what the tool said).
    results: tuple[tuple[str, dict[str, Any], str], ...] = ()


Step = Callable[[Turn], Reply]


def _finish(summary: str, **details: Any) -> Reply:
    return Reply(
        "Done; reporting the result.", (Call("finish", {"summary": summary, "details": details}),)
    )


def _fix_steps(first: Turn) -> list[Step]:
    # A second round of a flow: the reviewer's finding is in the input; answer it too.
    asked = REVIEW_FINDING in first.prompt
    answer: list[Step] = [
        lambda t: Reply(
            f"The reviewer asked: {REVIEW_FINDING}; adding that test.",
            (Call("write_file", {"path": NEGATIVE_TEST_FILE, "content": NEGATIVE_TEST}),),
        )
    ]
    files = [BUG_FILE, NEGATIVE_TEST_FILE] if asked else [BUG_FILE]
    return [
        lambda t: Reply("Let me look at the project first.", (Call("list_files", {"path": "."}),)),
        lambda t: Reply(f"Reading {BUG_FILE}.", (Call("read_file", {"path": BUG_FILE}),)),
        lambda t: Reply("Running the tests to see what fails.", (Call("run_tests"),)),
        lambda t: Reply(
            "`add` subtracts instead of adding; fixing it.",
            (Call("edit_file", {"path": BUG_FILE, "old": BUG_OLD, "new": BUG_NEW}),),
        ),
        *(answer if asked else []),
        lambda t: Reply("Running the tests again.", (Call("run_tests"),)),
        lambda t: _finish(
            "Fix add() in calc.py: it subtracted its arguments\n\n"
            "calc.add returned a - b; it now returns a + b and the test suite passes.",
            files=files,
            tests="passed" if "passed" in t.last_tool else "unknown",
        ),
    ]


def _planner_steps(first: Turn) -> list[Step]:
    plan = "\n".join(f"{i}. {step}" for i, step in enumerate(PLAN_STEPS, 1))
    return [
        lambda t: Reply("Looking at the project before planning.", (Call("list_files"),)),
        lambda t: Reply(f"Reading {BUG_FILE}.", (Call("read_file", {"path": BUG_FILE}),)),
        lambda t: _finish(plan, steps=list(PLAN_STEPS)),
    ]


def flow_round(text: str) -> int:
    """The flow round a conversation belongs to: the highest ``-r<round>`` of the step run ids
    (and branches named after them) it mentions; 1 when it names none."""
    return max((int(m.group(1)) for m in ROUND.finditer(text)), default=1)


def _reviewer_steps(first: Turn) -> list[Step]:
    def verdict(t: Turn) -> Reply:
        if flow_round(t.prompt) >= 2:
            return _finish(
                "The fix is right and the requested test is there; approved.",
                verdict="approve",
                findings=[],
            )
        return _finish(
            f"add() is fixed, but {REVIEW_FINDING}; please add one.",
            verdict="request_changes",
            findings=[REVIEW_FINDING],
        )

    return [
        lambda t: Reply("Looking at the change.", (Call("list_files"),)),
        lambda t: Reply(f"Reading {BUG_FILE}.", (Call("read_file", {"path": BUG_FILE}),)),
        verdict,
    ]


def _tester_steps(first: Turn) -> list[Step]:
    def report(t: Turn) -> Reply:
        passed = "[exit code 0]" in t.last_tool
        summary = "The test suite passes." if passed else "The test suite fails."
        return _finish(summary, passed=passed)

    return [
        lambda t: Reply("Running the project's tests.", (Call("run_tests"),)),
        report,
    ]


def _steady_steps(first: Turn) -> list[Step]:
    work = "for i in 1 2 3 4 5 6; do echo working $i; sleep 1; done"
    return [
        lambda t: Reply("Warming up: some shell work.", (Call("run_shell", {"command": work}),)),
        lambda t: Reply("And a bit more.", (Call("run_shell", {"command": work}),)),
        *_fix_steps(first),
    ]


def _slow_steps(first: Turn) -> list[Step]:
    return [
        lambda t: Reply(
            "This will take a while.",
            (Call("run_shell", {"command": "echo started; sleep 600", "timeout": 900}),),
        ),
        lambda t: _finish("The long command ended."),
    ]


def _approval_steps(first: Turn) -> list[Step]:
    def decided(t: Turn) -> Reply:
        if "was not run" in t.last_tool:
            return _finish("The command was not approved, so nothing was run.", approved=False)
        return _finish("The approved command ran.", approved=True)

    return [
        lambda t: Reply(
            "I need to run one command; it needs a human's approval.",
            (Call("run_shell", {"command": "echo the gated command ran"}),),
        ),
        decided,
    ]


PLAN = "1. Change add() in calc.py to return a + b.\n2. Run the tests."


def _plan_steps(first: Turn) -> list[Step]:
    return [
        lambda t: Reply("Looking around before planning.", (Call("list_files", {"path": "."}),)),
        lambda t: Reply("Here is my plan.", (Call("exit_plan_mode", {"plan": PLAN}),)),
        lambda t: Reply(
            "The plan is approved; writing it down.",
            (Call("write_file", {"path": "PLAN.md", "content": PLAN + "\n"}),),
        ),
        lambda t: _finish("Wrote the approved plan to PLAN.md.", files=["PLAN.md"]),
    ]


def _chat_steps(first: Turn) -> list[Step]:
    return [lambda t: _finish("Hello from the offline model.")]


# The `resume` script's files: each written at one turn and read back at a later one.
RESUME_FILES = {
    "notes/alpha.txt": "alpha: the first note of the resume script\n",
    "notes/beta.txt": "beta: the second note, written after the first journal line\n",
    "notes/gamma.txt": "gamma: the third note, read back two turns later\n",
}
RESUME_JOURNAL = "journal.log"


def _append(step: int, pause: float = 0.0) -> Call:
    # A distinct line per step: a line twice in the journal is a side effect run twice.
    wait = f"sleep {pause}; " if pause else ""
    line = f"step {step}"
    command = f"{wait}echo '{line}' >> {RESUME_JOURNAL} && echo 'appended {line}'"
    return Call("run_shell", {"command": command})


def _resume_report(t: Turn) -> Reply:
    seen = dict.fromkeys(RESUME_FILES, False)
    journal: list[str] = []
    interrupted = 0
    for tool, arguments, output in t.results:
        if "interrupted" in output.lower():
            interrupted += 1
        if tool == "read_file" and arguments.get("path") in seen:
            path = str(arguments["path"])
            seen[path] = RESUME_FILES[path].strip() in output
        elif tool == "run_shell" and str(arguments.get("command", "")).startswith("cat "):
            journal = [x for x in output.splitlines() if x.startswith("step ")]
    ok = all(seen.values())
    return _finish(
        "Wrote, read back and journaled; " + ("every read matched." if ok else "a read differed."),
        seen=seen,
        journal=journal,
        interrupted=interrupted,
    )


def _resume_steps(first: Turn, pauses: tuple[float, float, float] = (0.0, 0.3, 0.0)) -> list[Step]:
    """The `resume` script; `pauses`: seconds each of its three journal appends sleeps first."""
    alpha, beta, gamma = RESUME_FILES

    def write(path: str) -> Step:
        return lambda t: Reply(
            f"Writing {path}.", (Call("write_file", {"path": path, "content": RESUME_FILES[path]}),)
        )

    def read(path: str) -> Step:
        return lambda t: Reply(f"Reading {path} back.", (Call("read_file", {"path": path}),))

    def shell(call: Call) -> Step:
        return lambda t: Reply("Noting progress in the journal.", (call,))

    return [
        write(alpha),
        shell(_append(2, pause=pauses[0])),
        write(beta),
        read(alpha),
        # A short pause: a kill after this turn's event often lands inside the command.
        shell(_append(5, pause=pauses[1])),
        write(gamma),
        read(beta),
        shell(_append(8, pause=pauses[2])),
        read(gamma),
        lambda t: Reply(
            "Printing the journal.", (Call("run_shell", {"command": f"cat {RESUME_JOURNAL}"}),)
        ),
        _resume_report,
    ]


# A script's steps, given the conversation (its prompt may shape them).
SCRIPTS: dict[str, Callable[[Turn], list[Step]]] = {
    "fix": _fix_steps,
    "steady": _steady_steps,
    "slow": _slow_steps,
    "approval": _approval_steps,
    "chat": _chat_steps,
    "plan": _plan_steps,
    "planner": _planner_steps,
    "reviewer": _reviewer_steps,
    "tester": _tester_steps,
    "resume": _resume_steps,
    # Seconds in each journal append: five runs started together all still run when a NATS
    # node is killed a moment later (scripts/chaos_cluster.py).
    "paced": lambda first: _resume_steps(first, pauses=(2.0, 2.0, 2.0)),
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def script_name(body: dict[str, Any]) -> str:
    """The script a request follows: a keyword in the messages, a model name, the example
    agent's role, or the default."""
    messages = body.get("messages") or []
    for message in messages:
        found = KEYWORD.search(_text_of(message.get("content")))
        if found and found.group(1) in SCRIPTS:
            return found.group(1)
    model = str(body.get("model") or "")
    if model.startswith("offline-") and model.removeprefix("offline-") in SCRIPTS:
        return model.removeprefix("offline-")
    system: dict[str, Any] = next((m for m in messages if m.get("role") == "system"), {})
    role = ROLE.match(_text_of(system.get("content")))
    return role.group(1) if role else DEFAULT_SCRIPT


def _results_of(messages: list[dict[str, Any]]) -> tuple[tuple[str, dict[str, Any], str], ...]:
    """Each tool message with the call it answers (matched by id): (tool, arguments, text)."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            calls[str(call.get("id"))] = (
                str(function.get("name")),
                arguments if isinstance(arguments, dict) else {},
            )
    out = []
    for message in messages:
        if message.get("role") == "tool":
            tool, arguments = calls.get(str(message.get("tool_call_id")), ("", {}))
            out.append((tool, arguments, _text_of(message.get("content"))))
    return tuple(out)


def _prompt_of(messages: list[dict[str, Any]]) -> str:
    """The system prompt and the input: every message before the first assistant turn."""
    parts = []
    for message in messages:
        if message.get("role") == "assistant":
            break
        parts.append(_text_of(message.get("content")))
    return "\n".join(parts)


EXTRACTION_MARKER = "[nexus-memory-extraction]"  # nexus_memory.extraction.MARKER


def extraction_answer(transcript: str) -> str:
    """Memory extraction's answer: the run's result summary as one memory."""
    fields = dict(line.split(": ", 1) for line in transcript.splitlines() if ": " in line)
    try:
        summary = str(json.loads(fields.get("Result", "{}")).get("result", {}).get("summary", ""))
    except ValueError:
        summary = ""
    first = summary.strip().splitlines()[0] if summary.strip() else ""
    if not first or fields.get("Outcome") != "completed":
        return json.dumps({"memories": []})
    scope = "repo" if "Repository" in fields else "agent"
    text = f"{first} (learned by {fields.get('Agent', 'an agent')} in {fields.get('Run', 'a run')})"
    return json.dumps({"memories": [{"text": text, "kind": "fact", "scope": scope}]})


def reply_for(body: dict[str, Any]) -> Reply:
    """The scripted reply to one chat-completions request."""
    messages = body.get("messages") or []
    if messages and EXTRACTION_MARKER in _text_of(messages[0].get("content")):
        return Reply(extraction_answer(_text_of(messages[-1].get("content"))))
    turns = sum(1 for m in messages if m.get("role") == "assistant")
    tool_messages = [m for m in messages if m.get("role") == "tool"]
    last_tool = _text_of(tool_messages[-1].get("content")) if tool_messages else ""
    offered = frozenset(str((t.get("function") or {}).get("name")) for t in body.get("tools") or [])
    turn = Turn(turns, last_tool, offered, _prompt_of(messages), _results_of(messages))
    steps = SCRIPTS[script_name(body)](turn)
    reply = steps[turns](turn) if turns < len(steps) else _finish("Nothing more to do.")
    missing = [c.name for c in reply.calls if offered and c.name not in offered]
    if missing:  # the agent was not granted what the script needs: say so and end
        return _finish(f"The offline model needs tools this agent lacks: {', '.join(missing)}.")
    if not offered and reply.calls:
        return Reply(reply.text or "No tools offered; nothing to do.")
    return reply


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


if __name__ == "__main__":
    main()
