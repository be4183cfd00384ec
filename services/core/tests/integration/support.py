"""Shared helpers of core's integration tests: sample documents, run events (waiting is
`nexus_testing.eventually`, re-exported)."""

from __future__ import annotations

from typing import Any, TypeVar

from nexus_testing import eventually

T = TypeVar("T")

AGENT_YAML = """
id: implementer
role: implementer
model: {name: test-model}
system_prompt: You implement tasks.
skills: [python]
tools: [read_file]
permissions: {can_commit: true}
"""

SKILL_MD = "---\nname: python\nversion: 1.0.0\n---\n# Python\nUse uv.\n"


async def run_events(bus: Any, run_id: str) -> list[Any]:
    """Every decoded event of one run, in stream order."""
    from nexus_events.contract.streams import RUNS

    return [d async for d in bus.replay(RUNS, run_id=run_id)]


async def event_names(bus: Any, run_id: str) -> list[str]:
    return [d.address.event for d in await run_events(bus, run_id)]


async def query(bus: Any, subject: str, body: dict[str, Any] | None = None) -> Any:
    """Ask a core query; return (error headers or None, decoded JSON body)."""
    import json

    msg = await bus.nc.request(subject, json.dumps(body or {}).encode(), timeout=5)
    error = None
    if msg.headers and "Nats-Service-Error-Code" in msg.headers:
        error = msg.headers["Nats-Service-Error-Code"]
    return error, json.loads(msg.data)


async def catalog_ready(core: Any) -> None:
    await eventually(core.catalog_fresh)


def mongodb_mode() -> str:
    """The id of the MongoDB server under test: ``mongodb-real`` or ``mongodb-secantus``
    (``mongodb-unavailable``: none, and the tests fail; `mongo_server` says how it is chosen)."""
    from .mongo_server import mongo_choice

    return mongo_choice().mode
