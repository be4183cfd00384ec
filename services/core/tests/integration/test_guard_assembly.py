"""The guard's settings from the catalog to the run, on real NATS + PostgreSQL: an agent's
dial and hooks, and its skill's hooks, reach the prepared RunConfig the runner is given."""

from __future__ import annotations

import json
from typing import Any

from nexus_events.contract import subjects
from nexus_events.events import RunPrepared
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_skill

from nexus_core.app import CoreApp

from .support import catalog_ready, eventually, run_events

AGENT = """
id: guarded
role: implementer
model: {name: test-model}
system_prompt: You implement tasks.
skills: [careful]
tools: [read_file, run_shell]
permissions: {auto_approve: curated}
hooks:
  before_tool_call:
    - {name: no-env, tool: read_file, path: "*.env", decision: deny, reason: secrets}
"""
SKILL = (
    "---\nname: careful\nversion: '1'\nhooks:\n  before_tool_call:\n"
    "    - {name: no-net, tool: run_shell, command_class: [network], decision: deny}\n"
    "  after_tool_call:\n    - {name: mask, decision: redact, redact: ['tok-[0-9]+']}\n"
    "---\nBe careful.\n"
)


async def test_dial_and_hooks_reach_the_prepared_config(bus: Bus, core: CoreApp) -> None:
    await apply_agent(bus, AGENT)
    await apply_skill(bus, SKILL)
    await catalog_ready(core)
    body: dict[str, Any] = {"agent_id": "guarded", "input": "go"}
    await bus.js.publish(subjects.run_event("r-guard", "requested"), json.dumps(body).encode())
    events = await eventually(
        lambda: run_events(bus, "r-guard"),
        lambda evs: any(d.address.event in ("prepared", "failed") for d in evs),
    )
    prepared = next(d.event for d in events if d.address.event in ("prepared", "failed"))
    assert isinstance(prepared, RunPrepared), prepared
    config = prepared.config
    assert config.permissions.auto_approve == "curated"
    assert [(r.name, r.decision) for r in config.hooks.before_tool_call] == [
        ("no-env", "deny"),
        ("no-net", "deny"),
    ]
    assert config.hooks.before_tool_call[1].command_class == ["network"]
    assert [r.redact for r in config.hooks.after_tool_call] == [["tok-[0-9]+"]]
