"""Helpers for runner scenarios: configs, reading a run's events, waiting with deadlines."""

from __future__ import annotations

import uuid
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import LOGS, RUNS
from nexus_events.events.base import Event
from nexus_events.events.runs import RunConfig
from nexus_events.transport.bus import Bus
from nexus_testing import eventually


def make_config(base_url: str, **overrides: Any) -> RunConfig:
    body: dict[str, Any] = {
        "run_id": f"run-{uuid.uuid4().hex[:10]}",
        "agent_id": "implementer",
        "system_prompt": "You are an implementer.",
        "input": "Make the tests pass.",
        "model": {"name": "gpt-4o-mini", "base_url": base_url},
        "tools": [
            "read_file", "write_file", "edit_file", "list_files", "search_files",
            "run_shell", "git_status", "git_diff", "git_commit", "run_tests", "finish",
        ],
    }  # fmt: skip
    body.update(overrides)
    return RunConfig.model_validate(body)


async def run_events(bus: Bus, run_id: str) -> list[Event]:
    return [d.event async for d in bus.replay(RUNS, run_id=run_id)]


async def log_text(bus: Bus, run_id: str, stream: str = "llm_text") -> str:
    lines = [d.event async for d in bus.replay(LOGS, filter_subject=subjects.run_log(run_id))]
    return "".join(getattr(e, "text", "") for e in lines if getattr(e, "stream", "") == stream)


async def wait_for(bus: Bus, run_id: str, name: str, timeout: float = 15) -> Event:
    """Poll the run's events until one named `name` is stored (or fail at the deadline)."""

    async def named() -> Event | None:
        events = await run_events(bus, run_id)
        return next((e for e in events if type(e).event_name == name), None)

    found: Event = await eventually(
        named,
        lambda event: event is not None,
        within=timeout,
        interval=0.05,
        what=f"a {name} event for {run_id}",
    )
    return found


def names(events: list[Event]) -> list[str]:
    return [type(e).event_name for e in events]
