"""The offline model's lab scripts over HTTP with the openai client: `lab-steps` is the same
for the same requests and reads the first on-demand skill at turn 2, so a changed skill
changes turn 3; `eval-strict`/`eval-lenient` answer with known pass rates."""

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
    for n in ("read_file", "write_file", "read_skill", "finish")
]
SYSTEM = (
    "You keep notes. [offline-model:lab-steps]\n\n"
    "## Skills on demand (read one with read_skill)\n"
    "- style: how notes are written\n"
    "- lint: what is checked\n"
)


@pytest.fixture
async def client() -> AsyncIterator[Any]:
    server = om.Server(chunk_delay=0)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    c = openai.AsyncOpenAI(api_key="x", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    async with srv:
        try:
            yield c
        finally:
            await c.close()


async def _run(
    client: Any, system: str, tool_output: dict[str, str], tools: list[dict[str, Any]] = TOOLS
) -> list[tuple[str, dict[str, Any]]]:
    """Drive the model to its finish as a runner would; each call (name, arguments)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "keep notes"},
    ]
    calls: list[tuple[str, dict[str, Any]]] = []
    for _ in range(8):
        reply = await client.chat.completions.create(model="m", messages=messages, tools=tools)
        message = reply.choices[0].message
        [call] = message.tool_calls
        arguments = json.loads(call.function.arguments)
        calls.append((call.function.name, arguments))
        if call.function.name == "finish":
            return calls
        messages.append(message.model_dump(exclude_none=True))
        output = tool_output.get(call.function.name, "ok")
        messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    raise AssertionError(f"no finish after {calls}")


async def test_lab_steps_is_deterministic_and_reads_the_first_on_demand_skill(
    client: Any,
) -> None:
    outputs = {"read_skill": "Write short notes.", "read_file": "step 1"}
    first = await _run(client, SYSTEM, outputs)
    again = await _run(client, SYSTEM, outputs)
    assert first == again  # same requests, same replies: a replay reproduces it
    assert [name for name, _ in first] == ["write_file", "read_skill", "write_file", "finish"]
    assert first[0][1] == {"path": om.STEP1_FILE, "content": om.STEP1_TEXT}
    assert first[1][1] == {"name": "style"}
    assert first[2][1]["path"] == om.STEP3_FILE
    assert str(len("Write short notes.")) in first[2][1]["content"]
    assert first[3][1]["details"] == {"steps": 3}

    changed = await _run(client, SYSTEM, {**outputs, "read_skill": "Write long, careful notes."})
    assert changed[:2] == first[:2]
    assert changed[2] != first[2]  # the skill's text changed turn 3's request and reply


async def test_lab_steps_without_on_demand_skills_reads_its_own_note(client: Any) -> None:
    calls = await _run(client, "You keep notes. [offline-model:lab-steps]", {"read_file": "x"})
    assert calls[1] == ("read_file", {"path": om.STEP1_FILE})
    assert "1 characters" in calls[2][1]["content"]
    # an on-demand listing but no read_skill tool offered: the note again
    no_tool = [t for t in TOOLS if t["function"]["name"] != "read_skill"]
    calls = await _run(client, SYSTEM, {}, tools=no_tool)
    assert calls[1] == ("read_file", {"path": om.STEP1_FILE})


async def _answer(client: Any, script: str, task: str) -> Any:
    reply = await client.chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": f"Answer. [offline-model:{script}]"},
            {"role": "user", "content": task},
        ],
        tools=TOOLS,
    )
    [call] = reply.choices[0].message.tool_calls
    assert call.function.name == "finish"
    return json.loads(call.function.arguments)["details"]["answer"]


async def test_eval_scripts_answer_with_known_pass_rates(client: Any) -> None:
    cases = ["answer: 42 [easy]", "answer: 7", "what is it? answer: blue sky [easy]"]
    strict = [await _answer(client, "eval-strict", c) for c in cases]
    lenient = [await _answer(client, "eval-lenient", c) for c in cases]
    assert strict == ["42", om.WRONG_ANSWER, "blue sky"]
    assert lenient == ["42", "7", "blue sky"]


def test_first_on_demand_skill_reads_list_items_after_the_heading() -> None:
    assert om.first_on_demand_skill(SYSTEM) == "style"
    numbered = "Skills loaded on-demand:\n\n1. `deploy` - how to ship\n2. other"
    assert om.first_on_demand_skill(numbered) == "deploy"
    assert om.first_on_demand_skill("## Skill: style (v1)\n- always loaded") is None
