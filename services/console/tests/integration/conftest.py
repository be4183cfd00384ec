"""A console on the test's real NATS (and, where a page needs core, a real core on the test's
PostgreSQL), tokens for each scope, and signed-in HTTP clients."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
import yaml
from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings
from nexus_events.transport.bus import Bus

from nexus_console.app import ConsoleApp
from nexus_console.config import ConsoleSettings

READ_TOKEN = "nxc_read-token-for-tests-0123456789"
OPERATE_TOKEN = "nxc_operate-token-for-tests-0123456789"
SECRET = "s" * 40


def tokens_file(path: Path) -> Path:
    entries = [
        {"name": "reader", "sha256": hashlib.sha256(READ_TOKEN.encode()).hexdigest(),
         "scope": "read"},
        {"name": "oper", "sha256": hashlib.sha256(OPERATE_TOKEN.encode()).hexdigest(),
         "scope": "operate"},
    ]  # fmt: skip
    path.write_text(yaml.safe_dump({"tokens": entries}))
    return path


@pytest.fixture
async def core(bus: Bus, pg_pool: asyncpg.Pool[Any]) -> AsyncIterator[CoreApp]:
    """A core on the test's NATS and database (no memory, no health port)."""
    settings = CoreSettings(health_port=None, memory_enabled=False, fetch_timeout=0.2)
    app = CoreApp(settings, bus=bus, pool=pg_pool)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


def console_settings(tmp_path: Path, **overrides: Any) -> ConsoleSettings:
    values: dict[str, Any] = {
        "console_port": 0,
        "health_port": None,
        "console_tokens_file": tokens_file(tmp_path / "console-tokens.yaml"),
        "console_session_secret": SECRET,
        "console_query_timeout": 3.0,
    }
    values.update(overrides)
    return ConsoleSettings(**values)


@pytest.fixture
async def console(bus: Bus, tmp_path: Path) -> AsyncIterator[ConsoleApp]:
    app = ConsoleApp(console_settings(tmp_path), bus=bus)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


@dataclass
class Browserless:
    """An HTTP client of the console with its own cookies (one person's browser)."""

    http: aiohttp.ClientSession
    base: str
    csrf: str = ""

    async def login(self, token: str) -> aiohttp.ClientResponse:
        response = await self.http.post(
            f"{self.base}/login", data={"token": token, "next": "/runs"}, allow_redirects=False
        )
        await response.read()
        return response

    async def get(self, path: str, **kwargs: Any) -> tuple[int, str]:
        async with self.http.get(f"{self.base}{path}", **kwargs) as response:
            text = await response.text()
            found = re.search(r'name="csrf-token" content="([^"]*)"', text)
            if found and found.group(1):
                self.csrf = found.group(1)
            return response.status, text

    async def post(self, path: str, data: dict[str, str], **kwargs: Any) -> tuple[int, str]:
        async with self.http.post(f"{self.base}{path}", data=data, **kwargs) as response:
            return response.status, await response.text()


Clients = Callable[[], Awaitable[Browserless]]


@pytest.fixture
async def clients(console: ConsoleApp) -> AsyncIterator[Clients]:
    made: list[aiohttp.ClientSession] = []

    async def make() -> Browserless:
        http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        made.append(http)
        return Browserless(http, console.url)

    yield make
    for http in made:
        await http.close()
