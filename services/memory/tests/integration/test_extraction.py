"""Extraction after a run: the run's model is asked once per run, what it names is recorded
through the secret guard with the run as source, and a redelivered ending records nothing."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.events import (
    ModelSpec,
    Origin,
    RunCompleted,
    RunConfig,
    RunPrepared,
    RunResult,
    ToolCalled,
)
from nexus_events.transport.bus import Bus
from nexus_testing import dead_letters, eventually
from tests.fakes.openai_server import FakeOpenAI, Reply

from services.memory.tests.conftest import MakeApp
from services.memory.tests.support import applied
from services.memory.tests.unit.test_guard import KEYS

ANSWER = {
    "memories": [
        {"text": "calc tests run with python -m pytest in examples/demo-repo", "scope": "repo"},
        {"text": "add() once subtracted; check arithmetic helpers first", "kind": "observation"},
        {"text": f"the CI token is {KEYS['github_token']}", "scope": "global"},
    ]
}


async def finish_run(
    bus: Bus, run_id: str, base_url: str, *, copies: int = 1, origin: Origin = Origin.CLI
) -> None:
    config = RunConfig(
        run_id=run_id, agent_id="implementer", task_id="T-1", system_prompt="x",
        model=ModelSpec(name="fake-model", base_url=base_url), input="fix calc.add",
        repo={"url": "https://github.com/acme/demo-repo"},  # type: ignore[arg-type]
        origin=origin,
    )  # fmt: skip
    await bus.publish(subjects.run_event(run_id, "prepared"), RunPrepared(config=config))
    await bus.publish(
        subjects.run_event(run_id, "tool_called"),
        ToolCalled(turn=1, call_id="c1", tool="run_tests", arguments={}),
    )
    done = RunCompleted(result=RunResult(summary="Fixed add() in calc.py; tests pass"))
    for i in range(copies):  # a redelivery as seen from the consumer: the same ending again
        await bus.publish(subjects.run_event(run_id, "completed"), done, msg_id=f"{run_id}-{i}")


async def test_extraction_records_once_per_run_and_guards_its_output(
    make_memory: MakeApp, bus: Bus, pg_pool: asyncpg.Pool
) -> None:
    async with FakeOpenAI(default=Reply(text="```json\n" + json.dumps(ANSWER) + "\n```")) as llm:
        memory = await make_memory(memory_extraction=True, llm_api_key="k")
        await finish_run(bus, "run-x1", llm.base_url, copies=2)

        async def extracted() -> Any:
            return await pg_pool.fetchrow(
                "SELECT * FROM memory.extractions WHERE run_id = 'run-x1'"
            )

        row = await eventually(extracted, what="run extracted")
        assert row["status"] == "recorded"
        assert len(row["memory_ids"]) == 2
        await applied(memory)
        stored = await pg_pool.fetch(
            "SELECT scope, kind, source, source_run_id FROM memory.memories ORDER BY scope"
        )
        assert [tuple(r) for r in stored] == [
            ("agent-implementer", "observation", "extraction", "run-x1"),
            ("repo-github-com-acme-demo-repo", "fact", "extraction", "run-x1"),
        ]
        # Let the second copy of the ending be handled, then check nothing more happened.
        assert memory.handlers is not None
        consumer = memory.handlers.durables[-1]
        await eventually(lambda: consumer.processed >= 2, what="both endings handled")
        assert len(llm.requests) == 1
        prompt = llm.requests[0]["messages"][1]["content"]
        assert "Fixed add() in calc.py" in prompt
        assert "run_tests" in prompt
        letters = await dead_letters(bus)
        assert [letter.reason for letter in letters] == ["secret_blocked"]
        assert KEYS["github_token"] not in json.dumps([letter.model_dump() for letter in letters])
        assert await pg_pool.fetchval("SELECT count(*) FROM memory.memories") == 2


async def test_a_lab_run_teaches_memory_nothing(
    make_memory: MakeApp, bus: Bus, pg_pool: asyncpg.Pool
) -> None:
    """A replay, fork or eval case (origin lab, docs/lab.md) repeats work on purpose: its
    ending is marked done without asking the model, and nothing is recorded."""
    async with FakeOpenAI(default=Reply(text="```json\n" + json.dumps(ANSWER) + "\n```")) as llm:
        await make_memory(memory_extraction=True, llm_api_key="k")
        await finish_run(bus, "run-lab1", llm.base_url, origin=Origin.LAB)

        async def extracted() -> Any:
            return await pg_pool.fetchrow(
                "SELECT * FROM memory.extractions WHERE run_id = 'run-lab1'"
            )

        row = await eventually(extracted, what="lab run marked")
        assert row["status"] == "nothing"
        assert llm.requests == []
        assert await pg_pool.fetchval("SELECT count(*) FROM memory.memories") == 0
