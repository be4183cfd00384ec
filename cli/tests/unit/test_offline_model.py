"""The offline model server speaks the chat-completions API the real openai client expects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nexus_cli.devstack import offline_model as om

openai = pytest.importorskip("openai")  # the runner's client, installed in the workspace

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("list_files", "read_file", "edit_file", "run_tests", "run_shell", "finish")
]


def _body(*messages: dict[str, Any], model: str = "m", tools: Any = None) -> dict[str, Any]:
    return {"model": model, "messages": list(messages), "tools": TOOLS if tools is None else tools}


def _conversation(script: str, turns: int) -> list[dict[str, Any]]:
    """A conversation that has taken `turns` assistant turns of `script`."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "you fix code"},
        {"role": "user", "content": f"[offline-model:{script}] go"},
    ]
    for i in range(turns):
        msgs.append({"role": "assistant", "content": "", "tool_calls": []})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "ok"})
    return msgs


def test_the_fix_script_walks_to_finish() -> None:
    names = []
    for turn in range(6):
        reply = om.reply_for(_body(*_conversation("fix", turn)))
        names.append(reply.calls[0].name)
    assert names == ["list_files", "read_file", "run_tests", "edit_file", "run_tests", "finish"]
    edit = om.reply_for(_body(*_conversation("fix", 3))).calls[0]
    assert edit.arguments == {"path": "calc.py", "old": om.BUG_OLD, "new": om.BUG_NEW}
    # past the end of a script: finish, never a loop
    assert om.reply_for(_body(*_conversation("fix", 9))).calls[0].name == "finish"


def test_script_selection_keyword_then_model_then_default() -> None:
    user = {"role": "user", "content": "hi"}
    assert om.script_name(_body(user)) == "fix"
    assert om.script_name(_body(user, model="offline-slow")) == "slow"
    tagged = {"role": "system", "content": "[offline-model:approval]"}
    assert om.script_name(_body(tagged, user, model="offline-slow")) == "approval"
    assert om.script_name(_body({"role": "user", "content": "[offline-model:nope]"})) == "fix"


def test_missing_tools_end_the_run_with_a_reason() -> None:
    only_finish = [t for t in TOOLS if t["function"]["name"] == "finish"]
    reply = om.reply_for(_body(*_conversation("fix", 0), tools=only_finish))
    assert reply.calls[0].name == "finish"
    assert "list_files" in reply.calls[0].arguments["summary"]


def test_a_denied_approval_is_reported() -> None:
    msgs = _conversation("approval", 1)
    msgs[-1]["content"] = "approval denied by me: the call was not run"
    reply = om.reply_for(_body(*msgs))
    assert reply.calls[0].arguments["details"] == {"approved": False}


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    server = om.Server(chunk_delay=0)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield f"http://127.0.0.1:{port}/v1"


async def test_streaming_tool_calls_through_the_openai_client(base_url: str) -> None:
    client = openai.AsyncOpenAI(api_key="x", base_url=base_url, max_retries=0)
    try:
        for _ in range(2):  # the same keep-alive connection serves several requests
            stream = await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=_conversation("fix", 3),  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
            text, args, name, usage, finish = "", "", "", None, None
            async for chunk in stream:
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    finish = choice.finish_reason or finish
                    for tc in choice.delta.tool_calls or []:
                        if tc.function is not None:
                            name = tc.function.name or name
                            args += tc.function.arguments or ""
            assert "fixing it" in text
            assert name == "edit_file"
            assert json.loads(args)["new"] == om.BUG_NEW
            assert finish == "tool_calls"
            assert usage is not None
            assert usage.prompt_tokens > 0
        plain = await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=_conversation("chat", 0),  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
        )
        call = plain.choices[0].message.tool_calls[0]  # type: ignore[index]
        assert call.function.name == "finish"  # type: ignore[union-attr]
        models = await client.models.list()
        assert [m.id for m in models.data] == [om.MODEL_NAME]
    finally:
        await client.close()
