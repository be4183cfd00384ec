"""Console: how soon an event shows in an open page, and the runs page over 10,000 runs.

(a) A run `requested` event published -> its row visible in an open /runs page, measured in
the browser (Debian's Chromium driven by Playwright): a MutationObserver stamps each new row
with Date.now(); the publisher stamps the wall clock just before each publish (same machine,
same clock). Beside it, in the same run, a raw NATS subscriber's publish -> receive of the
very same events.
(b) The runs page with 10,000 runs in core's projection: first contentful paint of /runs (the
browser's own paint timing) and the time from submitting a filter to the filtered table
swapped in (htmx:afterSwap on #runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import yaml
from nexus_console.app import ConsoleApp
from nexus_console.config import ConsoleSettings
from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import CATALOG, RUNS, ensure_streams
from nexus_events.events import (
    Event,
    ModelSpec,
    RunCompleted,
    RunConfig,
    RunPrepared,
    RunRequested,
    RunResult,
    RunStarted,
    RunTurn,
)
from nexus_events.transport.bus import Bus, BusSettings, Outgoing
from nexus_events.transport.catalog_commands import apply_agent, apply_skill
from nexus_testing.browser import start_chromium, stop_chromium

RUN_COUNT = 10_000
AGENTS = 20  # runs spread over agents bench-0..bench-19; the filter picks one (500 runs)
WAVE = 500
EVENTS_PER_RUN = 5  # requested, prepared, started, turn, completed
LIVE_EVENTS = 200
LIVE_GAP = 0.02  # seconds between live events: a steady stream, not one burst
PAINTS = 5
FILTERS = 5
TOKEN = "nxc_bench-operate-token-0123456789"

AGENT = """
id: {agent}
role: implementer
model: {{name: bench-model}}
system_prompt: You implement tasks.
skills: [python]
tools: [read_file]
"""
SKILL = "---\nname: python\nversion: 1.0.0\n---\n# Python\nUse uv.\n"

# Stamps every row added to the runs table with the browser's wall clock, by run id.
OBSERVE_ROWS = """() => {
  window.__arrivals = {};
  const body = document.querySelector('#runs-body');
  new MutationObserver((records) => {
    const now = Date.now();
    for (const r of records) for (const n of r.addedNodes) {
      if (n.nodeType === 1 && n.dataset && n.dataset.run && !(n.dataset.run in window.__arrivals))
        window.__arrivals[n.dataset.run] = now;
    }
  }).observe(body, {childList: true, subtree: true});
}"""

# Submit the filter form with an agent and time until htmx has swapped in a table of only
# that agent's runs (any other swap, e.g. a live row, does not count).
FILTER_BY_AGENT = """(agent) => new Promise((resolve) => {
  const form = document.querySelector('form.filters');
  const filtered = () => {
    const cells = [...document.querySelectorAll('#runs-body tr td:nth-child(3)')];
    return cells.length > 0 && cells.every((c) => c.textContent.trim() === agent);
  };
  const t0 = performance.now();
  const check = () => {
    if (!filtered()) return;
    document.body.removeEventListener('htmx:afterSwap', check);
    resolve(performance.now() - t0);
  };
  document.body.addEventListener('htmx:afterSwap', check);
  form.querySelector('input[name=agent]').value = agent;
  htmx.trigger(form, 'submit');
})"""

FIRST_CONTENTFUL_PAINT = """() => new Promise((resolve) => {
  const seen = performance.getEntriesByName('first-contentful-paint');
  if (seen.length) return resolve(seen[0].startTime);
  new PerformanceObserver((list) => resolve(list.getEntries()[0].startTime))
    .observe({type: 'paint', buffered: true});
})"""


def _percentiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49], q[98]


def _run_events(i: int) -> list[Event]:
    agent = f"bench-{i % AGENTS}"
    task_id = f"T-{i % 1_000}"
    config = RunConfig(
        run_id=f"run-{i}",
        agent_id=agent,
        task_id=task_id,
        input="fix the bug",
        system_prompt="You implement tasks.",
        model=ModelSpec(name="bench-model"),
        catalog_revisions={f"agent/{agent}": 1},
    )
    return [
        RunRequested(agent_id=agent, task_id=task_id, input=f"fix bug number {i}"),
        RunPrepared(config=config),
        RunStarted(runner="bench"),
        RunTurn(turn=1, model="bench-model", tokens_in=1200, tokens_out=300, cost_usd=0.002),
        RunCompleted(result=RunResult(summary="fixed")),
    ]


def _waves() -> Iterator[list[Outgoing]]:
    for start in range(0, RUN_COUNT, WAVE):
        runs = {i: _run_events(i) for i in range(start, min(start + WAVE, RUN_COUNT))}
        yield [
            Outgoing(subjects.run_event(f"run-{i}", events[phase].event_name), events[phase])
            for phase in range(EVENTS_PER_RUN)
            for i, events in runs.items()
        ]


async def _projected(pool: asyncpg.Pool[Any], within: float = 600) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        done = await pool.fetchval(
            "SELECT count(*) FROM core_agent_runs.agent_runs WHERE status = 'completed'"
        )
        if done >= RUN_COUNT:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"core projected {done} of {RUN_COUNT} runs in {within:.0f}s")


@contextlib.asynccontextmanager
async def _browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    profile = Path(tempfile.mkdtemp(prefix="nxbench-chromium-"))
    chromium = start_chromium(profile)
    try:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.connect_over_cdp(chromium.cdp_url)
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            context.set_default_timeout(30_000)
            yield context
    finally:
        stop_chromium(chromium.process)
        shutil.rmtree(profile, ignore_errors=True)


async def _sign_in(context: Any, url: str) -> Any:
    page = await context.new_page()
    await page.goto(f"{url}/login?next=%2Fruns")
    await page.fill("#token", TOKEN)
    await page.click("form[action='/login'] button[type=submit]")
    await page.wait_for_url(f"{url}/runs")
    return page


async def _live_latency(bus: Bus, page: Any) -> tuple[list[float], list[float]]:
    """Publish LIVE_EVENTS requested events; (browser row latencies, raw NATS latencies) ms."""
    await page.evaluate(OBSERVE_ROWS)
    received: dict[str, float] = {}

    async def on_message(msg: Any) -> None:
        run_id = subjects.parse_subject(msg.subject).run_id or ""
        received.setdefault(run_id, time.time() * 1000)

    sub = await bus.nc.subscribe(
        subjects.run_events_filter(None, RunEvent.REQUESTED), cb=on_message
    )
    published: dict[str, float] = {}
    body = RunRequested(agent_id="bench-0", task_id="T-live", input="live")
    for i in range(LIVE_EVENTS):
        run_id = f"live-{i}"
        published[run_id] = time.time() * 1000
        await bus.publish(subjects.run_event(run_id, RunEvent.REQUESTED), body)
        await asyncio.sleep(LIVE_GAP)
    deadline = time.monotonic() + 30
    arrivals: dict[str, float] = {}
    while time.monotonic() < deadline:
        arrivals = await page.evaluate("() => window.__arrivals")
        if len(arrivals) >= LIVE_EVENTS and len(received) >= LIVE_EVENTS:
            break
        await asyncio.sleep(0.2)
    await sub.unsubscribe()
    missing = sorted(set(published) - set(arrivals))
    if missing:
        raise RuntimeError(f"{len(missing)} events never showed in the page: {missing[:5]}")
    browser = [arrivals[r] - published[r] for r in published]
    raw = [received[r] - published[r] for r in published if r in received]
    return browser, raw


async def _page_figures(context: Any, url: str) -> tuple[list[float], list[float]]:
    paints, filters = [], []
    for _ in range(PAINTS):
        page = await context.new_page()
        await page.goto(f"{url}/runs")
        paints.append(float(await page.evaluate(FIRST_CONTENTFUL_PAINT)))
        await page.close()
    page = await context.new_page()
    await page.goto(f"{url}/runs")
    for n in range(FILTERS):
        filters.append(float(await page.evaluate(FILTER_BY_AGENT, f"bench-{n + 1}")))
        rows = await page.locator("#runs-body tr").count()
        agents = set(await page.locator("#runs-body tr td:nth-child(3)").all_inner_texts())
        if not rows or agents != {f"bench-{n + 1}"}:
            raise RuntimeError(f"the filter showed {rows} rows of agents {agents}")
    await page.close()
    return paints, filters


async def run(nats_url: str, dsn: str) -> list[tuple[str, float, str, float]]:
    base = Path(tempfile.mkdtemp(prefix="nxbench-console-"))
    tokens = base / "tokens.yaml"
    entry = {"name": "bench", "sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}
    tokens.write_text(yaml.safe_dump({"tokens": [{**entry, "scope": "operate"}]}))
    bus = await Bus.connect(BusSettings(url=nats_url), source="bench")
    pool = await asyncpg.create_pool(dsn, min_size=2, max_size=10)
    assert pool is not None
    core_settings = CoreSettings(
        database_url=dsn, memory_enabled=False, health_port=None, fetch_timeout=0.5
    )
    console_settings = ConsoleSettings(
        console_port=0, health_port=None, console_tokens_file=tokens,
        console_session_secret="b" * 40, console_query_timeout=30.0,
    )  # fmt: skip
    try:
        await ensure_streams(bus.js)
        await bus.js.purge_stream(RUNS)  # earlier benchmarks' runs are not this page's
        async with CoreApp(core_settings, bus=bus, pool=pool) as core:
            for n in range(AGENTS):
                await apply_agent(bus, AGENT.format(agent=f"bench-{n}"))
            await apply_skill(bus, SKILL)
            assert core.catalog_runner is not None
            catalog_last = (await bus.js.stream_info(CATALOG)).state.last_seq
            await core.catalog_runner.wait_until(CATALOG, catalog_last, within=60)
            for wave in _waves():
                await bus.publish_many(wave)
            await _projected(pool)
            console = ConsoleApp(console_settings, bus=bus)
            await console.start()
            try:
                async with _browser() as context:
                    page = await _sign_in(context, console.url)
                    paints, filters = await _page_figures(context, console.url)
                    browser, raw = await _live_latency(bus, page)
            finally:
                await console.stop()
    finally:
        await pool.close()
        with contextlib.suppress(Exception):
            await bus.close()
        shutil.rmtree(base, ignore_errors=True)
    b50, b99 = _percentiles(browser)
    r50, r99 = _percentiles(raw)
    return [
        ("raw NATS publish->receive p50 (ms)", r50, "", 1.0),
        ("raw NATS publish->receive p99 (ms)", r99, "", 1.0),
        ("event published->row in the page p50 (ms)", b50, "raw p50", b50 / r50 if r50 else 0),
        ("event published->row in the page p99 (ms)", b99, "raw p99", b99 / r99 if r99 else 0),
        (f"/runs first contentful paint, {RUN_COUNT:,} runs, median (ms)",
         statistics.median(paints), "", 1.0),
        ("/runs filter submitted->table swapped, median (ms)", statistics.median(filters), "", 1.0),
        ("/runs filter submitted->table swapped, max (ms)", max(filters), "", 1.0),
    ]  # fmt: skip
