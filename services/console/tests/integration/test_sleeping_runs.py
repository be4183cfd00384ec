"""Sleeping runs in the console on a real NATS and core: the runs list and the run page say
until when and why a run sleeps (from core's run view, worded by the console's clock), live
when it goes to sleep and wakes; "Wake now" publishes one `wake_requested` as the operator,
and is refused to a read token, to a forged form, to bad input and for a run that does not
sleep, publishing nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.codec import MSG_ID
from nexus_events.contract.runstate import RunEvent, RunStatus
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunRequested, RunResumed, RunSleeping, RunStarted, RunWakeRequested
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_events.transport.run_requests import request_run
from nexus_testing.polling import eventually

from nexus_console.app import ConsoleApp

from .conftest import OPERATE_TOKEN, READ_TOKEN, Browserless, Clients, console_settings
from .flow_fixtures import AGENT_YAML, LiveFeed, since_of

# The console's clock in these tests: the "in 3m00s" of a page is worded from it, so a fixed
# one makes the words exact (sessions are timed by it too, consistently).
NOW = datetime(2026, 11, 29, 14, 2, tzinfo=UTC)
# A page's status once core has folded the run's `started` (the word alone is on every page).
RUNNING = f'<span class="status {RunStatus.RUNNING.value}">'


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
async def console(bus: Bus, tmp_path: Path, clock: ManualClock) -> AsyncIterator[ConsoleApp]:
    """This module's console reads the manual clock (the `clients` fixture signs in to it)."""
    app = ConsoleApp(console_settings(tmp_path), bus=bus, clock=clock)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


async def _running(bus: Bus, core: CoreApp, run_id: str) -> None:
    """A run of the implementer that core assembled and a runner started."""
    await apply_agent(bus, AGENT_YAML)
    await eventually(core.catalog_fresh, what="catalog applied")
    await request_run(bus, run_id, RunRequested(agent_id="implementer", input="x"), source="t")

    async def prepared() -> bool:
        flt = subjects.run_events_filter(run_id, RunEvent.PREPARED)
        return any([d async for d in bus.replay(RUNS, filter_subject=flt)])

    await eventually(prepared, what="prepared")
    await bus.publish(subjects.run_event(run_id, RunStarted), RunStarted())


async def _sleep(bus: Bus, run_id: str, until: datetime, reason: str) -> None:
    slept = RunSleeping(until=until, reason=reason, attempt=1, turn=2)
    await bus.publish(subjects.run_event(run_id, RunSleeping), slept)


async def _page(client: Browserless, path: str, until: str) -> str:
    async def page() -> str:
        status, text = await client.get(path)
        return text if status == 200 else ""

    return str(await eventually(page, lambda t: until in t, what=f"{until!r} on {path}"))


async def _signed_in(clients: Clients, token: str) -> Browserless:
    client = await clients()
    await client.login(token)
    return client


async def _wakes(bus: Bus, run_id: str) -> list[RunWakeRequested]:
    flt = subjects.run_events_filter(run_id, RunEvent.WAKE_REQUESTED)
    return [
        d.event
        async for d in bus.replay(RUNS, filter_subject=flt)
        if isinstance(d.event, RunWakeRequested)
    ]


async def test_a_sleeping_run_shows_its_wake_time_and_reason(
    bus: Bus, core: CoreApp, clients: Clients, clock: ManualClock
) -> None:
    run_id = "sleepy-1"
    await _running(bus, core, run_id)
    until = NOW + timedelta(minutes=3)
    await _sleep(bus, run_id, until, "waiting for CI on <main>")
    reader = await _signed_in(clients, READ_TOKEN)

    label = f"sleeping until {until:%H:%M} UTC (in 3m00s)"
    page = await _page(reader, f"/runs/{run_id}", label)
    assert 'class="status sleeping"' in page
    assert '<span class="sleep-reason">waiting for CI on &lt;main&gt;</span>' in page
    listed = await _page(reader, "/runs", label)
    row = listed.split(f'id="run-{run_id}"', 1)[1].split("</tr>", 1)[0]
    assert label in row
    assert "waiting for CI on &lt;main&gt;" in row
    # Sleeping runs are one of the list's filters, and only they pass it.
    _, only = await reader.get(f"/runs?status={RunStatus.SLEEPING.value}")
    assert f'id="run-{run_id}"' in only

    # The words come from the console's clock: past the wake time the run is due (it still
    # sleeps until its woken attempt starts).
    clock.advance(4 * 60)
    _, page = await reader.get(f"/runs/{run_id}")
    assert f"sleeping until {until:%H:%M} UTC (due)" in page


async def test_going_to_sleep_and_waking_reach_open_pages_live(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    run_id = "sleepy-2"
    await _running(bus, core, run_id)
    operator = await _signed_in(clients, OPERATE_TOKEN)
    run_page = await _page(operator, f"/runs/{run_id}", RUNNING)
    assert 'action="/runs/sleepy-2/wake"' not in run_page
    runs_page = await _page(operator, "/runs", f'id="run-{run_id}"')
    until = NOW + timedelta(hours=1, minutes=30)
    async with (
        LiveFeed(operator, f"/live/runs/{run_id}?since={since_of(run_page)}") as one,
        LiveFeed(operator, f"/live/runs?since={since_of(runs_page)}") as listed,
    ):
        await _sleep(bus, run_id, until, "deploy in progress")
        label = f"sleeping until {until:%H:%M} UTC (in 1h30m)"
        text = await one.wait_for(label, 'action="/runs/sleepy-2/wake"')
        assert 'id="run-status" class="run-status" hx-swap-oob="true"' in text
        assert "deploy in progress" in text
        wake_form = text.split('<div id="run-wake" hx-swap-oob="true">', 1)[1].split("</div>")[0]
        assert "disabled" not in wake_form  # an operator's page
        assert f'value="{operator.csrf}"' in wake_form
        text = await listed.wait_for(label)
        assert f'id="status-{run_id}" class="run-status" hx-swap-oob="true"' in text
        assert "deploy in progress" in text

        resumed = RunResumed(attempt=2, turns=2, messages=5, entries=5)
        await bus.publish(subjects.run_event(run_id, RunResumed), resumed)
        woke = f"{RUNNING}running</span>"
        text = await one.wait_for('data-event="resumed"', woke)
        # The wake form goes away with the sleep.
        after = text.rsplit('<div id="run-wake" hx-swap-oob="true">', 1)[1].split("</div>")[0]
        assert "<form" not in after
        await listed.wait_for(
            f'<span id="status-{run_id}" class="run-status" hx-swap-oob="true">{woke}'
        )
    # A reload shows it too, once core has folded `resumed` (its read model lags the stream).
    page = await _page(operator, f"/runs/{run_id}", RUNNING)
    assert 'action="/runs/sleepy-2/wake"' not in page


def _wake_form(page: str, run_id: str) -> str:
    """The page's Wake now form, up to its end."""
    return page.split(f'action="/runs/{run_id}/wake"', 1)[1].split("</form>", 1)[0]


async def test_wake_now_publishes_one_wake_as_the_operator(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    run_id = "sleepy-3"
    await _running(bus, core, run_id)
    await _sleep(bus, run_id, NOW + timedelta(hours=2), "tomorrow's build")
    operator = await _signed_in(clients, OPERATE_TOKEN)
    page = await _page(operator, f"/runs/{run_id}", "sleeping until")
    form = _wake_form(page, run_id)
    assert 'id="wake-run"' in form
    assert "disabled" not in form

    # Asking twice for one sleep, even in other words, stores one wake (its message id names
    # the attempt that slept, as `nexus run wake`'s does).
    for reason in ("  CI is green  ", "really, wake up"):
        status, _ = await operator.post(
            f"/runs/{run_id}/wake", {"csrf": operator.csrf, "reason": reason},
            allow_redirects=False,
        )  # fmt: skip
        assert status == 303
    wakes = await _wakes(bus, run_id)
    assert [(w.reason, w.requested_by) for w in wakes] == [("CI is green", "console:oper")]
    flt = subjects.run_events_filter(run_id, RunEvent.WAKE_REQUESTED)
    stored = [m async for m in bus.replay_raw(RUNS, filter_subject=flt)]
    assert [(m.headers or {}).get(MSG_ID) for m in stored] == [f"console:wake:{run_id}:1"]


async def test_wake_is_refused_to_a_read_token_a_forged_form_and_bad_input(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    run_id = "sleepy-4"
    await _running(bus, core, run_id)
    await _sleep(bus, run_id, NOW + timedelta(minutes=10), "waiting")
    reader = await _signed_in(clients, READ_TOKEN)
    page = await _page(reader, f"/runs/{run_id}", "sleeping until")
    form = _wake_form(page, run_id)
    assert 'id="wake-run" class="primary" disabled' in form
    status, text = await reader.post(f"/runs/{run_id}/wake", {"csrf": reader.csrf})
    assert status == 403
    assert "read-only console token" in text

    operator = await _signed_in(clients, OPERATE_TOKEN)
    await operator.get(f"/runs/{run_id}")
    status, _ = await operator.post(f"/runs/{run_id}/wake", {"csrf": "forged"})
    assert status == 403
    too_long = {"csrf": operator.csrf, "reason": "x" * 2001}
    status, text = await operator.post(f"/runs/{run_id}/wake", too_long)
    assert status == 400
    assert "reason" in text
    assert await _wakes(bus, run_id) == []


async def test_wake_of_a_run_that_does_not_sleep_is_a_409_and_publishes_nothing(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    run_id = "sleepy-5"
    await _running(bus, core, run_id)
    operator = await _signed_in(clients, OPERATE_TOKEN)
    page = await _page(operator, f"/runs/{run_id}", RUNNING)
    assert 'action="/runs/sleepy-5/wake"' not in page
    status, text = await operator.post(f"/runs/{run_id}/wake", {"csrf": operator.csrf})
    assert status == 409
    assert f"run {run_id} is not sleeping: running" in text
    status, _ = await operator.post("/runs/no-such-run/wake", {"csrf": operator.csrf})
    assert status == 404
    assert await _wakes(bus, run_id) == []
    assert await _wakes(bus, "no-such-run") == []
