"""The browser plugin of the workspace (``-p nexus_testing.browser``, root pyproject): one headless
Debian Chromium per pytest worker, driven by Playwright per test, and `screenshot` for the docs.

Why the Chromium process, not a Playwright `Browser`, is what lives for the session: the suite
runs each test on its own event loop (pytest-asyncio, loop scope ``function``) and Playwright's
async objects belong to the loop that made them. So the ``chromium`` fixture (session scope)
starts the browser once with a DevTools port, and each test's ``browser`` connects to it over
CDP on the test's own loop; the console tests then mix ``page`` with ``bus`` or ``pg_pool``
freely. Playwright's own browser download cannot work here: it always drives
``/usr/bin/chromium`` (or ``NEXUS_CHROMIUM``), installed by ``make setup``
(scripts/ensure_chromium.sh).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

CHROMIUM = "/usr/bin/chromium"
INSTALL_HINT = (
    "install it with `make setup` as root, or `apt-get install chromium fonts-dejavu-core`"
)
# What Chromium needs on a machine with a closed network, as root, without a GPU: without the
# background-networking flags it keeps trying to reach Google's hosts and logs every refusal.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
START_TIMEOUT = 30.0
# Every wait of a test (locators, navigation, expect): generous for a loaded two-core machine.
DEFAULT_TIMEOUT_MS = 15_000


@dataclass(frozen=True)
class ChromiumProcess:
    """A running headless Chromium: its process and the DevTools endpoint tests connect to."""

    process: subprocess.Popen[bytes]
    cdp_url: str


def chromium_executable() -> str:
    """The Chromium the tests drive: ``NEXUS_CHROMIUM`` if set, else Debian's."""
    return os.environ.get("NEXUS_CHROMIUM", CHROMIUM)


def start_chromium(user_data_dir: Path, executable: str | None = None) -> ChromiumProcess:
    """Start headless Chromium on a free DevTools port; fail the test (never skip) if it cannot."""
    binary = executable or chromium_executable()
    if shutil.which(binary) is None:
        pytest.fail(f"Chromium is missing ({binary} not found): {INSTALL_HINT}", pytrace=False)
    log = user_data_dir / "chromium.log"
    with log.open("wb") as log_file:
        # Its own session: Debian's /usr/bin/chromium is a shell wrapper, the group is the browser.
        process = subprocess.Popen(
            [
                binary,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={user_data_dir}",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
        )
    port_file = user_data_dir / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        lines = port_file.read_text().splitlines() if port_file.exists() else []
        if lines and lines[0].strip().isdigit():
            return ChromiumProcess(process, f"http://127.0.0.1:{lines[0].strip()}")
        time.sleep(0.05)
    exit_code = process.poll()
    stop_chromium(process)
    what = f"exited with code {exit_code}" if exit_code is not None else "gave no DevTools port"
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
    pytest.fail(
        f"Chromium ({binary}) could not start ({what} within {START_TIMEOUT:.0f}s: {tail[0]});"
        f" {INSTALL_HINT}",
        pytrace=False,
    )


def stop_chromium(process: subprocess.Popen[bytes]) -> None:
    """Stop the browser's whole process group (renderers, GPU and zygote processes included)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            process.wait()


def screenshots_dir() -> Path:
    """Where `screenshot` writes: ``NEXUS_SCREENSHOTS_DIR``, else the repository's docs/console/."""
    configured = os.environ.get("NEXUS_SCREENSHOTS_DIR")
    if configured:
        return Path(configured)
    here = Path(__file__).resolve()
    root = next((p for p in here.parents if (p / "uv.lock").exists()), Path.cwd())
    return root / "docs" / "console"


async def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """Save a PNG of ``page`` as ``<screenshots dir>/<name>.png`` (the console docs embed them)."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"screenshot name must be a plain file name, got {name!r}")
    target = screenshots_dir() / f"{name.removesuffix('.png')}.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=target, full_page=full_page)
    return target


@pytest.fixture(scope="session")
def chromium() -> Iterator[ChromiumProcess]:
    """One headless Chromium per worker (session scope) with a fresh profile, stopped after."""
    profile = Path(tempfile.mkdtemp(prefix="nxchromium-"))
    browser_process = start_chromium(profile)
    try:
        yield browser_process
    finally:
        stop_chromium(browser_process.process)
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
async def browser(chromium: ChromiumProcess) -> AsyncIterator[Browser]:
    """Playwright connected to the worker's Chromium on this test's event loop."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.fail("playwright is missing: `uv sync --all-packages` (dev group)", pytrace=False)
    async with async_playwright() as playwright:
        connected = await playwright.chromium.connect_over_cdp(
            chromium.cdp_url, timeout=DEFAULT_TIMEOUT_MS
        )
        yield connected


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A page in a fresh browser context (no cookies or storage of other tests), closed after."""
    from playwright.async_api import expect

    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    expect.set_options(timeout=DEFAULT_TIMEOUT_MS)
    try:
        yield await context.new_page()
    finally:
        await context.close()
