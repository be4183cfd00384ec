"""`python -m nexus_runner` as a real process: from a config file and from a prepared event."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from nexus_events.contract import subjects
from nexus_events.events.runs import RunCompleted, RunPrepared
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from .support import make_config, run_events


async def _run_cli(args: list[str], nats_url: str, tmp_path: Path) -> int:
    env = {
        **os.environ,
        "NEXUS_NATS_URL": nats_url,
        "NEXUS_BUDGET_RESERVATIONS": "off",  # no spend service here
        "NEXUS_WORKSPACE_ROOT": str(tmp_path / "runs"),
        "NEXUS_HEARTBEAT_INTERVAL": "0.5",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nexus_runner", *args, env=env
    )
    return await asyncio.wait_for(proc.wait(), 60)


def _script() -> list[Reply]:
    return [
        Reply(tool_calls=(ToolCall("write_file", {"path": "hello.txt", "content": "hi"}),)),
        Reply(tool_calls=(ToolCall("finish", {"summary": "wrote hello"}),)),
    ]


async def test_cli_runs_a_config_file(bus: Bus, nats_url: str, tmp_path: Path) -> None:
    async with FakeOpenAI(_script()) as llm:
        config = make_config(llm.base_url)
        path = tmp_path / "run.json"
        path.write_text(config.model_dump_json())
        code = await _run_cli(["--config", str(path)], nats_url, tmp_path)
    assert code == 0
    events = await run_events(bus, config.run_id)
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].result.files_changed == ["hello.txt"]
    assert (tmp_path / "runs" / config.run_id / "hello.txt").read_text() == "hi"


async def test_cli_reads_the_prepared_event(bus: Bus, nats_url: str, tmp_path: Path) -> None:
    async with FakeOpenAI(_script()) as llm:
        config = make_config(llm.base_url)
        await bus.publish(subjects.run_event(config.run_id, "prepared"), RunPrepared(config=config))
        code = await _run_cli(["--run-id", config.run_id], nats_url, tmp_path)
    assert code == 0
    events = await run_events(bus, config.run_id)
    assert isinstance(events[-1], RunCompleted)
