"""The console's vendored front-end assets are the recorded files, under permissive licences
kept beside them, and each is the browser bundle it claims to be."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from playwright.async_api import Page, expect

from scripts.licence_check import is_copyleft
from scripts.vendor_console_assets import (
    MANIFEST,
    VENDOR_DIR,
    load_manifest,
    offline_problems,
)

# The licence texts say what their SPDX identifier claims (the first words of each licence).
LICENCE_WORDS = {
    "MIT": "Permission is hereby granted, free of charge",
    "0BSD": "Permission to use, copy, modify, and/or distribute this software for any",
}
# The global each bundle defines when loaded by a plain <script> tag (what the pages use).
GLOBALS = {
    "htmx.min.js": "typeof htmx.ajax === 'function' && htmx.version.startsWith('2.')",
    "sse.js": "window.definedExtensions.includes('sse')",
    "dagre.min.js": (
        "typeof dagre.layout === 'function' && typeof dagre.graphlib.Graph === 'function'"
    ),
    "chart.umd.min.js": "typeof Chart === 'function' && Chart.version.startsWith('4.')",
}


def test_every_vendored_file_is_recorded_with_its_digest_and_a_permissive_licence() -> None:
    manifest = load_manifest()
    assert {a.package for a in manifest.assets} == {
        "htmx.org",
        "htmx-ext-sse",
        "@dagrejs/dagre",
        "chart.js",
    }
    assert offline_problems(manifest) == []
    for asset in manifest.assets:
        assert not is_copyleft(asset.licence)
        licence_text = " ".join((VENDOR_DIR / asset.licence_file).read_text().split())
        assert LICENCE_WORDS[asset.licence] in licence_text, asset.licence_file


def test_a_changed_or_unlisted_vendored_file_is_reported(tmp_path: Path) -> None:
    copy = tmp_path / "vendor"
    shutil.copytree(VENDOR_DIR, copy)
    htmx = copy / "htmx.min.js"
    htmx.write_bytes(htmx.read_bytes() + b"\n")
    (copy / "dagre.LICENSE").unlink()
    (copy / "jquery.min.js").write_text("/* not recorded */")

    problems = offline_problems(load_manifest(MANIFEST), copy)

    assert problems == [
        "jquery.min.js: in the vendor directory but not in vendor.json",
        "htmx.min.js: sha256 differs from vendor.json",
        "dagre.LICENSE: the licence text is missing",
    ]


# Records the extensions sse.js defines: htmx keeps its registry private.
RECORD_EXTENSIONS = """<script>
window.definedExtensions = [];
const define = htmx.defineExtension;
htmx.defineExtension = (name, extension) => {
  window.definedExtensions.push(name);
  return define.call(htmx, name, extension);
};
</script>"""
# A live region as the console's pages have them: htmx swaps in each server-sent "tick" event.
LIVE_REGION = (
    '<div hx-ext="sse" sse-connect="/events"><p id="live" sse-swap="tick">waiting</p></div>'
)


@pytest.fixture
async def vendor_url() -> AsyncIterator[str]:
    """The vendor directory served on 127.0.0.1, a page loading every bundle, and an SSE feed."""
    scripts = [f'<script src="/vendor/{name}"></script>' for name in GLOBALS]
    body = "".join([scripts[0], RECORD_EXTENSIONS, *scripts[1:], LIVE_REGION])

    async def index(_: web.Request) -> web.Response:
        return web.Response(
            text=f"<!doctype html><html><body>{body}</body></html>", content_type="text/html"
        )

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"event: tick\ndata: <b>tick 1</b>\n\n")
        return response

    app = web.Application()
    app.router.add_get("/", index)
    app.router.add_get("/events", events)
    app.router.add_static("/vendor/", VENDOR_DIR)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    finally:
        await runner.cleanup()


async def test_each_bundle_loads_in_chromium_and_htmx_swaps_server_sent_events(
    page: Page, vendor_url: str
) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    await page.goto(vendor_url)
    for name, check in GLOBALS.items():
        assert await page.evaluate(check) is True, name
    await expect(page.locator("#live b")).to_have_text("tick 1")
    assert errors == []
