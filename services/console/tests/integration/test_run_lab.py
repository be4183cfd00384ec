"""The run page shows what the lab made of a run: the run it replays (linked), the run and
turn it forks, its first divergence (from its `diverged` event, linked to the timeline row,
which stands out), and golden marks; read from a real core and the run's real stream."""

from __future__ import annotations

from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunDiverged, RunGoldenMarked, RunRequested, RunStarted, RunTurn
from nexus_events.events.lab_specs import DivergenceKind, LabMode, LabSpec, OnDivergence
from nexus_events.events.transcripts import TranscriptEntry
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_events.transport.micro import read_reply
from nexus_events.transport.run_requests import request_run
from nexus_testing.polling import eventually

from .conftest import READ_TOKEN, Browserless, Clients
from .flow_fixtures import AGENT_YAML


async def _started(bus: Bus, core: CoreApp, run_id: str, lab: LabSpec | None = None) -> None:
    """A run of the implementer (a lab run when `lab` is given) assembled and started; it
    writes a transcript entry, as a runner would, so that core accepts a lab run of it."""
    await apply_agent(bus, AGENT_YAML)
    await eventually(core.catalog_fresh, what="catalog applied")
    request = RunRequested(agent_id="implementer", input="fix it", lab=lab)
    await request_run(bus, run_id, request, source="t")

    async def prepared() -> bool:
        filter_subject = subjects.run_events_filter(run_id, RunEvent.PREPARED)
        return any([d async for d in bus.replay(RUNS, filter_subject=filter_subject)])

    await eventually(prepared, what=f"{run_id} prepared")
    await bus.publish(subjects.run_event(run_id, RunStarted), RunStarted())
    entry = TranscriptEntry(attempt=1, index=0, op="message", message={"role": "user"})
    await bus.publish(subjects.run_transcript(run_id), entry)


async def _page(client: Browserless, run_id: str, until: str) -> str:
    async def page() -> str:
        status, text = await client.get(f"/runs/{run_id}")
        return text if status == 200 else ""

    return str(await eventually(page, lambda t: until in t, what=f"{until!r} on {run_id}"))


async def test_a_replay_links_its_source_and_shows_its_first_divergence(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await _started(bus, core, "lab-src-1")
    replay = LabSpec(mode=LabMode.REPLAY, source_run_id="lab-src-1")
    await _started(bus, core, "lab-replay-1", replay)
    await bus.publish(
        subjects.run_event("lab-replay-1", RunTurn), RunTurn(turn=1, model="m", replayed=True)
    )
    diverged = RunDiverged(
        turn=2, kind=DivergenceKind.SYSTEM_PROMPT, detail="the system prompt differs",
        recorded="You implement tasks.", actual="You implement tasks carefully.",
        action=OnDivergence.STOP,
    )  # fmt: skip
    ack = await bus.publish(subjects.run_event("lab-replay-1", RunDiverged), diverged)
    client = await clients()
    await client.login(READ_TOKEN)
    page = await _page(client, "lab-replay-1", "first divergence")
    lab = page.split('id="lab"', 1)[1].split("</section>", 1)[0]
    assert 'replay of</dt><dd><a href="/runs/lab-src-1">lab-src-1</a>' in lab
    assert "turn 2 · <strong>system_prompt</strong>: the system prompt differs" in lab
    assert "stopped" in lab
    assert f'href="#ev-{ack.seq}"' in lab
    row = page.split(f'id="ev-{ack.seq}"', 1)[1].split("</tr>", 1)[0]
    assert 'class="ev diverged"' in row
    assert "You implement tasks carefully." in row
    # The source run is no lab run: its lab section lists the replay made of it, from core's
    # `forks`, and names no source of its own.
    source = await _page(client, "lab-src-1", 'href="/runs/lab-replay-1"')
    section = source.split('id="lab"', 1)[1].split("</section>", 1)[0]
    assert 'href="/runs/lab-replay-1"' in section
    assert "replay of" not in section


async def test_a_fork_names_its_source_turn_and_input_and_a_golden_mark_shows(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await _started(bus, core, "lab-src-2")
    for turn in range(1, 8):  # a fork at turn 7 needs a source that got that far
        await bus.publish(subjects.run_event("lab-src-2", RunTurn), RunTurn(turn=turn, model="m"))

    async def turns() -> int:
        asked = await bus.nc.request(subjects.CORE_RUNS_GET, b'{"run_id": "lab-src-2"}')
        return int(read_reply(asked).data.get("turns", 0))

    await eventually(turns, lambda n: n == 7, what="the source's 7 turns projected")
    fork = LabSpec(mode=LabMode.FORK, source_run_id="lab-src-2", at_turn=7, input="use a dict")
    await _started(bus, core, "lab-fork-2", fork)
    client = await clients()
    await client.login(READ_TOKEN)
    page = await _page(client, "lab-fork-2", "forked from")
    assert '<a href="/runs/lab-src-2">lab-src-2</a> at turn 7 · told: <q>use a dict</q>' in page
    assert "first divergence" not in page
    marked = RunGoldenMarked(golden=True, marked_by="cli:alice", note="the reference fix")
    await bus.publish(subjects.run_event("lab-src-2", RunGoldenMarked), marked)
    page = await _page(client, "lab-src-2", 'class="status golden"')
    assert "marked golden by cli:alice · the reference fix" in page
    # Taken back: the last mark decides.
    unmarked = RunGoldenMarked(golden=False, marked_by="cli:alice")
    await bus.publish(subjects.run_event("lab-src-2", RunGoldenMarked), unmarked)
    page = await _page(client, "lab-src-2", "no longer golden")
    assert 'class="status golden"' not in page
