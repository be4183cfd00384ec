"""Recorded runs for the lab's scenarios: a source run driven by the fake model, stored as
core would have it (its `prepared` config, then the runner's events and transcript)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events.lab_specs import LabSpec
from nexus_events.events.runs import RunCompleted, RunConfig, RunPrepared
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings

from .support import make_config

WRITE_A = ToolCall("write_file", {"path": "a.txt", "content": "one\n"}, id="w1")
WRITE_B = ToolCall("write_file", {"path": "b.txt", "content": "two\n"}, id="w2")
REWRITE_A = ToolCall("write_file", {"path": "a.txt", "content": "one, again\n"}, id="w3")
READ_A = ToolCall("read_file", {"path": "a.txt"}, id="r1")
FINISH = ToolCall("finish", {"summary": "wrote a and b"}, id="f1")
# Four turns: a file written at 1, another written and the first rewritten at 2, a read at 3.
SCRIPT = [
    Reply(text="writing a", tool_calls=(WRITE_A,)),
    Reply(tool_calls=(WRITE_B, REWRITE_A)),
    Reply(text="checking", tool_calls=(READ_A,)),
    Reply(tool_calls=(FINISH,)),
]
SKILL = {
    "name": "style",
    "version": "1",
    "content": "Write files in lower case.",
    "on_demand": True,
    "description": "How files are written.",
}
# Three turns: a write, the on-demand skill read at 2, then finish at 3.
SKILL_SCRIPT = [
    Reply(tool_calls=(WRITE_A,)),
    Reply(tool_calls=(ToolCall("read_skill", {"name": "style"}, id="k1"),)),
    Reply(tool_calls=(FINISH,)),
]


def accepting(settings: RunnerSettings) -> RunnerSettings:
    """Settings whose acceptance command passes (the fixture repo's own tests fail)."""
    return settings.model_copy(update={"acceptance_command": "true"})


async def record(
    bus: Bus,
    settings: RunnerSettings,
    remote: Path,
    script: list[Reply] | None = None,
    **overrides: Any,
) -> RunConfig:
    """Run a source run to completion against the fake model; its config is returned."""
    async with FakeOpenAI(script or SCRIPT) as llm:
        config = make_config(llm.base_url, repo={"url": str(remote)}, **overrides)
        await bus.publish(
            subjects.run_event(config.run_id, RunEvent.PREPARED), RunPrepared(config=config)
        )
        terminal = await execute_run(config, accepting(settings), bus)
    assert isinstance(terminal, RunCompleted), terminal
    return config


def lab_config(source: RunConfig, base_url: str, **lab: Any) -> RunConfig:
    """A lab run of `source` as core assembles it: the same agent, a new run id."""
    fresh = make_config(base_url)
    model = source.model.model_copy(update={"base_url": base_url})
    spec = LabSpec.model_validate({"source_run_id": source.run_id, **lab})
    return source.model_copy(update={"run_id": fresh.run_id, "model": model, "lab": spec})
