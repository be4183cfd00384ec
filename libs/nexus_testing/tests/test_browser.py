"""The browser plugin drives a real Chromium: a click runs the page's script, a screenshot lands."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from nexus_testing.browser import ChromiumProcess, screenshot, screenshots_dir
from playwright.async_api import Page, expect

COUNTER_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>counter</title></head>
<body style="font-family: sans-serif">
  <h1 id="status">not clicked</h1>
  <button id="go" onclick="document.getElementById('status').textContent = 'clicked ' +
    (++window.clicks)">Click me</button>
  <script>window.clicks = 0;</script>
</body></html>"""

# The worker's Chromium as the first browser test saw it: the next test must see the same one.
CHROMIUM_PIDS: list[int] = []


@pytest.fixture
async def counter_url() -> AsyncIterator[str]:
    """A tiny aiohttp site on 127.0.0.1 (a free port) serving the counter page."""

    async def counter(_: web.Request) -> web.Response:
        return web.Response(text=COUNTER_PAGE, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", counter)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


async def test_click_runs_the_page_script_and_a_screenshot_is_saved(
    page: Page,
    counter_url: str,
    chromium: ChromiumProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NEXUS_SCREENSHOTS_DIR", str(tmp_path / "shots"))
    await page.goto(counter_url)
    await expect(page.locator("#status")).to_have_text("not clicked")

    await page.get_by_role("button", name="Click me").click()
    await page.get_by_role("button", name="Click me").click()

    await expect(page.locator("#status")).to_have_text("clicked 2")
    await page.evaluate("document.cookie = 'seen=1; path=/'")
    assert await page.evaluate("document.cookie") == "seen=1"
    CHROMIUM_PIDS.append(chromium.process.pid)
    saved = await screenshot(page, "counter")
    assert saved == tmp_path / "shots" / "counter.png"
    data = saved.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    # A blank 1280x800 page compresses to a few hundred bytes; text and a button make it larger.
    assert len(data) > 2_000


async def test_the_next_test_gets_a_fresh_context_on_the_same_chromium(
    page: Page, counter_url: str, chromium: ChromiumProcess
) -> None:
    # Runs after the click test in this file (one worker runs a file whole, in order): the
    # cookie that test left on 127.0.0.1 (cookies ignore the port) is not in this context.
    await page.goto(counter_url)
    assert await page.evaluate("document.cookie") == ""
    assert chromium.process.poll() is None
    assert set(CHROMIUM_PIDS) <= {chromium.process.pid}


def test_screenshots_go_to_docs_console_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEXUS_SCREENSHOTS_DIR", raising=False)
    target = screenshots_dir()
    assert target.parts[-2:] == ("docs", "console")
    assert (target.parent.parent / "uv.lock").exists()


async def test_screenshot_refuses_a_path_as_name(page: Page) -> None:
    with pytest.raises(ValueError, match="plain file name"):
        await screenshot(page, "../escape")
