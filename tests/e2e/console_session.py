"""The console of the e2e stack as its tests reach it: its URLs, tokens added to its tokens file
with `nexus console token`, signed-in browser contexts and signed-in HTTP clients."""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from playwright.async_api import Browser, BrowserContext, Page

from tests.e2e.conftest import Stack
from tests.support import devstack

DEFAULT_TIMEOUT_MS = 20_000


@dataclass(frozen=True)
class Console:
    url: str
    health_url: str
    # The tokens file the console reads (digests), and the dev stack's own operate token.
    tokens_file: Path
    dev_token: str


async def cli(stack: Stack, *args: str) -> devstack.Result:
    """`nexus ARGS...` off the event loop (the browser's pipe keeps being served meanwhile)."""
    return await asyncio.to_thread(stack.nexus, *args)


def console_of(stack: Stack) -> Console:
    """The stack's console as `nexus dev status -o json` and the console's process show it:
    where its pages and its health answer, its tokens file, the token made for the user."""
    status = stack.nexus("dev", "status", "-o", "json")
    assert status.code == 0, status.stderr
    shown: dict[str, Any] = status.json()
    assert shown.get("console_url"), f"the dev stack shows no console_url: {shown}"
    assert shown.get("console_token_file"), f"the dev stack shows no token file: {shown}"
    service = stack.state()["services"].get("console") or {}
    assert service.get("url"), f"the dev stack has no console health URL: {service}"
    tokens_file = devstack.service_env(stack, "console")["NEXUS_CONSOLE_TOKENS_FILE"]
    return Console(
        url=str(shown["console_url"]).rstrip("/"),
        health_url=str(service["url"]).rstrip("/"),
        tokens_file=Path(tokens_file),
        dev_token=Path(shown["console_token_file"]).read_text().strip(),
    )


def add_token(stack: Stack, console: Console, scope: str, name: str) -> str:
    """A new token of `scope` for `name` in the stack's tokens file; the token itself."""
    made = stack.nexus(
        "console", "token", "--file", str(console.tokens_file), "--scope", scope, "--as", name
    )
    assert made.code == 0, made.stderr + made.stdout
    found = re.search(r"^token: (\S+)$", made.stdout, re.MULTILINE)
    assert found, made.stdout
    return found.group(1)


async def context_for(browser: Browser) -> BrowserContext:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    return context


async def sign_in(page: Page, console: Console, token: str, then: str = "/runs") -> None:
    """The login form, as a person fills it; ends on `then`."""
    await page.goto(f"{console.url}/login?next={then}")
    await page.fill("#token", token)
    await page.click("form[action='/login'] button[type=submit]")
    await page.wait_for_url(f"{console.url}{then}")


async def csrf_of(page: Page) -> str:
    value = await page.get_attribute("meta[name=csrf-token]", "content")
    assert value, "the page carries no CSRF token"
    return value


@dataclass
class Client:
    """A signed-in HTTP client of the console (its own cookie jar), for raw page text."""

    http: aiohttp.ClientSession
    base: str

    async def get(self, path: str) -> tuple[int, str]:
        async with self.http.get(f"{self.base}{path}") as response:
            return response.status, await response.text()

    async def stream(self, path: str, until: tuple[str, ...], within: float) -> str:
        """What an SSE stream sends until its text holds one of `until` (it never ends by
        itself), or `within` seconds have passed."""
        chunks: list[str] = []
        headers = {"Accept": "text/event-stream"}
        async with self.http.get(f"{self.base}{path}", headers=headers) as response:
            assert response.status == 200, f"{path}: {response.status}"
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within):
                    async for chunk in response.content.iter_any():
                        chunks.append(chunk.decode(errors="replace"))
                        if any(marker in "".join(chunks) for marker in until):
                            break
        return "".join(chunks)


async def client_for(console: Console, token: str) -> Client:
    http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with http.post(
        f"{console.url}/login", data={"token": token, "next": "/runs"}, allow_redirects=False
    ) as response:
        assert response.status == 303, f"login: {response.status}"
    return Client(http, console.url)


def sse_path(html: str) -> str | None:
    """The live feed a page connects to (its `sse-connect`), unescaped."""
    found = re.search(r'sse-connect="([^"]+)"', html)
    return found.group(1).replace("&amp;", "&") if found else None
