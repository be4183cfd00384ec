"""The dead letters page on a real NATS: newest first, filtered, one letter in full, live, and
replay: an operator's puts the original back on its subject once (a second replay is a
duplicate), a read viewer's is refused."""

from __future__ import annotations

import asyncio

import aiohttp
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunStarted
from nexus_events.transport.bus import Bus
from nexus_events.transport.dead_letters import build_dead_letter

from .conftest import OPERATE_TOKEN, READ_TOKEN, Browserless, Clients


async def _file(bus: Bus, run_id: str, service: str, reason: str) -> None:
    letter = build_dead_letter(
        service=service,
        subject=subjects.run_event(run_id, RunStarted),
        data=b'{"not": "an envelope"}',
        headers={"X-Trace": "t-1"},
        reason=reason,
        error=f"{reason}: the body is no event",
        consumer="core_runs",
        stream=None,
        stream_seq=None,
        num_delivered=3,
    )
    assert await bus.file_dead_letter(letter)


async def _on_subject(bus: Bus, subject: str) -> list[bytes]:
    return [m.data async for m in bus.replay_raw(RUNS, filter_subject=subject)]


async def _signed_in(clients: Clients, token: str) -> Browserless:
    client = await clients()
    await client.login(token)
    status, _ = await client.get("/dead-letters")
    assert status == 200
    return client


def _seqs(page: str) -> list[int]:
    return [int(part.split('"', 1)[0]) for part in page.split('<tr id="letter-')[1:]]


async def test_letters_are_listed_newest_first_filtered_and_shown_in_full(
    bus: Bus, clients: Clients
) -> None:
    await _file(bus, "run_d1", "core", "undecodable")
    await _file(bus, "run_d2", "runner", "invalid_event")
    await _file(bus, "run_d3", "core", "invalid_event")
    client = await _signed_in(clients, READ_TOKEN)
    _, page = await client.get("/dead-letters")
    seqs = _seqs(page)
    assert len(seqs) == 3
    assert seqs == sorted(seqs, reverse=True)
    _, core_only = await client.get("/dead-letters?service=core")
    assert "run_d1" in core_only
    assert "run_d3" in core_only
    assert "run_d2" not in core_only
    _, both = await client.get("/dead-letters?service=core&reason=invalid_event")
    assert _seqs(both) == [seqs[0]]
    _, older = await client.get(f"/dead-letters?before={seqs[0]}")
    assert _seqs(older) == seqs[1:]

    status, letter = await client.get(f"/dead-letters/{seqs[-1]}")
    assert status == 200
    assert "undecodable: the body is no event" in letter
    assert subjects.run_event("run_d1", RunStarted) in letter
    assert "X-Trace" in letter
    assert "t-1" in letter
    assert "{&#34;not&#34;: &#34;an envelope&#34;}" in letter
    assert (await client.get("/dead-letters/999999"))[0] == 404
    assert (await client.get("/dead-letters/x1"))[0] == 400
    assert (await client.get("/dead-letters?before=zero"))[0] == 400


async def test_a_letter_replayed_twice_reaches_its_subject_once(bus: Bus, clients: Clients) -> None:
    await _file(bus, "run_d4", "core", "undecodable")
    subject = subjects.run_event("run_d4", RunStarted)
    client = await _signed_in(clients, OPERATE_TOKEN)
    _, page = await client.get("/dead-letters")
    [seq] = _seqs(page)

    status, text = await client.post(f"/dead-letters/{seq}/replay", {"csrf": client.csrf})
    assert status == 200, text
    assert f"replayed dead letter {seq} onto {subject}" in text
    status, text = await client.post(f"/dead-letters/{seq}/replay", {"csrf": client.csrf})
    assert status == 200, text
    assert "already replayed" in text
    assert await _on_subject(bus, subject) == [b'{"not": "an envelope"}']


async def test_a_read_viewer_may_not_replay_nor_a_forged_post(bus: Bus, clients: Clients) -> None:
    await _file(bus, "run_d5", "core", "undecodable")
    subject = subjects.run_event("run_d5", RunStarted)
    reader = await _signed_in(clients, READ_TOKEN)
    _, page = await reader.get("/dead-letters")
    [seq] = _seqs(page)
    assert "disabled" in page.split(f'<tr id="letter-{seq}"', 1)[1].split("</tr>", 1)[0]
    status, text = await reader.post(f"/dead-letters/{seq}/replay", {"csrf": reader.csrf})
    assert status == 403
    assert "read-only" in text
    operator = await _signed_in(clients, OPERATE_TOKEN)
    status, _ = await operator.post(f"/dead-letters/{seq}/replay", {})
    assert status == 403
    assert await _on_subject(bus, subject) == []


async def test_a_new_dead_letter_arrives_live(bus: Bus, clients: Clients) -> None:
    client = await _signed_in(clients, READ_TOKEN)
    _, page = await client.get("/dead-letters?service=core")
    since = page.split("since=", 1)[1].split('"', 1)[0]
    received: list[str] = []

    async def follow() -> None:
        url = f"{client.base}/live/dead-letters?service=core&since={since}"
        async with client.http.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r:
            assert r.status == 200
            async for raw in r.content:
                received.append(raw.decode())
                if "run_d7" in "".join(received):
                    return

    task = asyncio.create_task(follow())
    await _file(bus, "run_d6", "runner", "undecodable")  # filtered out
    await _file(bus, "run_d7", "core", "undecodable")
    await asyncio.wait_for(task, 20)
    text = "".join(received)
    assert "event: letter" in text
    assert 'hx-swap-oob="afterbegin:#letters-body"' in text
    assert "run_d6" not in text
