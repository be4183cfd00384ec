"""`nexus memory ...` and `nexus projections rebuild memory` against a real memory service
(MemoryApp in this process, the offline WordLlama embedder) on a real nats-server and
PostgreSQL with pgvector: the CLI runs in a thread with its own event loop, as a user runs it."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from nexus_events.contract.streams import MEMORY
from nexus_events.transport.bus import Bus
from nexus_memory.app import MemoryApp
from nexus_memory.embedding import WordLlamaEmbedder
from nexus_testing import eventually
from services.memory.tests.conftest import memory_settings
from tests.support.cli import nexus as run_nexus
from typer.testing import Result

from nexus_cli.commands import memory as memory_cmd
from nexus_cli.errors import ExitCode

# Real-looking keys of two shapes the secret guard knows (an AWS key id, a GitHub token).
AWS_KEY = "AKIA" + "Q3EGRTZ7N5KXW2PB"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
# Seconds to wait for the memory projection to show a write (a loaded 2-core machine).
VISIBLE = 30.0

Nexus = Callable[..., Awaitable[Result]]
MakeApp = Callable[..., Awaitable[MemoryApp]]


@pytest.fixture(scope="session")
def embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture
async def make_memory(bus: Bus, pg_dsn: str, embedder: WordLlamaEmbedder) -> AsyncIterator[MakeApp]:
    apps: list[MemoryApp] = []

    async def make(**overrides: Any) -> MemoryApp:
        started = MemoryApp(memory_settings(pg_dsn, **overrides), bus=bus, embedder=embedder)
        await started.start()
        apps.append(started)
        return started

    yield make
    for started in reversed(apps):
        await started.stop()


@pytest.fixture
async def memory(make_memory: MakeApp) -> MemoryApp:
    return await make_memory()


@pytest.fixture
def nexus(nats_url: str, tmp_path: Path) -> Nexus:
    return functools.partial(run_nexus, nats_url, tmp_path, columns=250)


async def ok_json(nexus: Nexus, *args: str) -> Any:
    result = await nexus(*args, "-o", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


async def search_ids(nexus: Nexus, query: str, *scopes: str) -> list[str]:
    args = [a for s in scopes for a in ("--scope", s)]
    reply = await ok_json(nexus, "memory", "search", query, *args)
    return [i["memory_id"] for i in reply["items"]]


async def listed(nexus: Nexus, *args: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await ok_json(nexus, "memory", "ls", *args))["items"]
    return items


async def add(nexus: Nexus, text: str, *args: str) -> str:
    result = await nexus("memory", "add", text, *args)
    assert result.exit_code == 0, result.stderr
    memory_id = result.stdout.strip()
    assert memory_id.startswith("mem-"), result.stdout
    return memory_id


async def test_add_search_ls_forget_then_search_no_longer_finds_it(
    memory: MemoryApp, nexus: Nexus
) -> None:
    scope = "agent:implementer"
    kept = await add(
        nexus,
        "Run the test suite with `uv run pytest -q` from the repository root",
        "--scope",
        scope,
        "--kind",
        "decision",
        "--tag",
        "testing",
        "--key",
        "test-command",
    )
    other = await add(nexus, "The staging database is rebuilt every night", "--scope", "global")

    async def found() -> bool:
        return kept in await search_ids(nexus, "how do I run the tests", scope)

    await eventually(found, within=VISIBLE, what="the memory found by `nexus memory search`")
    table = await nexus("memory", "search", "how do I run the tests", "--scope", scope)
    assert table.exit_code == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith(kept))
    assert "agent-implementer" in row
    assert "decision" in row
    assert "meaning #" in row  # why it matched
    assert "uv run pytest -q" in row
    # Scopes isolate: another agent's search never sees it.
    assert kept not in await search_ids(nexus, "how do I run the tests", "agent:reviewer")

    await eventually(
        lambda: _ids_listed(nexus, "--scope", "global"), within=VISIBLE, what="global listed"
    )
    mine = await listed(nexus, "--scope", scope)
    assert [(i["memory_id"], i["kind"], i["tags"], i["key"], i["status"]) for i in mine] == [
        (kept, "decision", ["testing"], "test-command", "current")
    ]
    assert {i["memory_id"] for i in await listed(nexus)} == {kept, other}

    forgot = await nexus("memory", "forget", kept, "--reason", "moved to tox")
    assert forgot.exit_code == 0, forgot.stderr
    assert f"forgot {kept} (scope agent-implementer)" in forgot.stdout

    async def gone() -> bool:
        return kept not in await search_ids(nexus, "how do I run the tests", scope)

    await eventually(gone, within=VISIBLE, what="the forgotten memory no longer found")
    assert await listed(nexus, "--scope", scope) == []
    history = await listed(nexus, "--scope", scope, "--history")
    assert [(i["memory_id"], i["status"]) for i in history] == [(kept, "forgotten")]
    again = await nexus("memory", "forget", "mem-nosuchmemory")
    assert again.exit_code == ExitCode.NOT_FOUND, again.output
    assert again.stderr.startswith("error: no memory 'mem-nosuchmemory'")


async def _ids_listed(nexus: Nexus, *args: str) -> list[str]:
    return [i["memory_id"] for i in await listed(nexus, *args)]


@pytest.mark.parametrize(
    ("secret", "finding"),
    [(AWS_KEY, "aws_access_key"), (GITHUB_TOKEN, "github_token")],
    ids=["aws", "github"],
)
async def test_a_blocked_secret_exits_2_with_one_line_and_is_never_listed(
    memory: MemoryApp, nexus: Nexus, bus: Bus, secret: str, finding: str
) -> None:
    blocked = await nexus("memory", "add", f"deploy with {secret} please", "--scope", "task:t1")
    assert blocked.exit_code == ExitCode.INVALID, blocked.output
    assert blocked.stdout == ""
    assert blocked.stderr.startswith("error: blocked: the memory contains a secret")
    assert finding in blocked.stderr
    assert secret not in blocked.stderr
    assert len(blocked.stderr.strip().splitlines()) == 1
    # A write after it is listed, so the projection has caught up past the refused one.
    after = await add(nexus, "deploys go through the release train", "--scope", "task:t1")
    await eventually(
        lambda: _ids_listed(nexus, "--history"), within=VISIBLE, what="the later write listed"
    )
    history = await listed(nexus, "--history")
    assert [i["memory_id"] for i in history] == [after]
    assert all(secret not in json.dumps(i) for i in history)
    assert [m.data async for m in bus.replay_raw(MEMORY) if secret.encode() in m.data] == []


async def test_redacted_write_prints_the_id_and_says_so(make_memory: MakeApp, nexus: Nexus) -> None:
    await make_memory(memory_secret_policy="redact")
    result = await nexus("memory", "add", f"billing uses {AWS_KEY}", "--scope", "repo:acme/app")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().startswith("mem-")
    assert "redacted: the text held aws_access_key" in result.stderr
    items = await eventually(
        lambda: listed(nexus, "--scope", "repo:acme/app"), within=VISIBLE, what="listed"
    )
    assert items[0]["text"] == "billing uses [REDACTED:aws_access_key]"
    assert items[0]["scope"] == "repo-acme-app"


async def test_ls_pages_through_next_cursor(
    memory: MemoryApp, nexus: Nexus, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [await add(nexus, f"fact number {n} about paging", "--scope", "global") for n in range(4)]
    await eventually(lambda: _count(nexus, 4), within=VISIBLE, what="four listed")
    monkeypatch.setattr(memory_cmd, "PAGE", 1)  # one memory per request: ls must follow cursors
    first = await ok_json(nexus, "memory", "ls", "--limit", "3")
    assert [i["memory_id"] for i in first["items"]] == ids[::-1][:3]
    assert first["next_cursor"] is not None
    rest = await ok_json(nexus, "memory", "ls", "--cursor", str(first["next_cursor"]))
    assert [i["memory_id"] for i in rest["items"]] == [ids[0]]
    assert rest["next_cursor"] is None
    table = await nexus("memory", "ls", "--limit", "3")
    assert table.exit_code == 0, table.stderr
    assert [line.split()[0] for line in table.stdout.splitlines()[1:4]] == ids[::-1][:3]
    assert f"more: add --cursor {first['next_cursor']}" in table.stdout


async def _count(nexus: Nexus, want: int) -> bool:
    return len(await listed(nexus)) == want


async def test_consolidate_and_rebuild_ask_the_memory_service(
    memory: MemoryApp, nexus: Nexus, bus: Bus
) -> None:
    text = "The API gateway times out after 30 seconds"
    first = await add(nexus, text, "--scope", "global")
    second = await add(nexus, text, "--scope", "global")
    await eventually(lambda: _count(nexus, 2), within=VISIBLE, what="both listed")
    consolidated = await ok_json(nexus, "memory", "consolidate", "--scope", "global")
    assert consolidated == {"scopes": 1, "superseded": 1, "stale": 0}
    # The newer duplicate is superseded by the older one.
    await eventually(lambda: _one_current(nexus), within=VISIBLE, what="one current")
    assert await _ids_listed(nexus) == [first]
    rebuilt = await nexus("projections", "rebuild", "memory")
    assert rebuilt.exit_code == 0, rebuilt.stderr
    assert rebuilt.stdout.startswith("rebuilt memory from ")
    assert "wordllama" in rebuilt.stdout
    after = await ok_json(nexus, "projections", "rebuild", "memory")
    stored = (await bus.js.stream_info(MEMORY)).state.messages
    assert (after["projection"], after["events"]) == ("memory", stored)
    assert stored >= 4  # two recorded, one superseded, the pass itself
    assert await _ids_listed(nexus) == [first]
    history = {i["memory_id"]: i["status"] for i in await listed(nexus, "--history")}
    assert history == {first: "current", second: "superseded"}


async def _one_current(nexus: Nexus) -> bool:
    return len(await _ids_listed(nexus)) == 1


@pytest.mark.parametrize(
    ("args", "subject"),
    [
        (("memory", "search", "anything", "--scope", "global"), "nexus.memory.v1.search"),
        (("memory", "add", "a fact", "--scope", "global"), "nexus.memory.v1.record"),
        (("memory", "ls"), "nexus.memory.v1.list"),
        (("memory", "forget", "mem-1"), "nexus.memory.v1.forget"),
        (("memory", "consolidate"), "nexus.memory.v1.consolidate"),
        (("projections", "rebuild", "memory"), "nexus.memory.v1.rebuild"),
    ],
    ids=["search", "add", "ls", "forget", "consolidate", "rebuild"],
)
async def test_memory_not_running_is_one_line_naming_the_service_and_exit_4(
    nexus: Nexus, args: tuple[str, ...], subject: str
) -> None:
    result = await nexus(*args)
    assert result.exit_code == ExitCode.UNAVAILABLE, result.output
    first = result.stderr.splitlines()[0]
    assert first == f"error: nothing answers {subject}: memory is not running"
    assert len(result.stderr.strip().splitlines()) <= 2  # the error, at most a hint
