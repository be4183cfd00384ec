"""Poison on the streams core follows: nothing wedges, nothing vanishes, nothing innocent is hurt.

Everything here is what an operator can do with a bare `nats pub`: huge undecodable bodies near
the server's max_payload, invalid UTF-8, unknown event tokens, subjects with too many or too
few tokens. Core must dead-letter each (once, whichever of its consumers rejects it first),
keep projecting the valid events around them, and say so truthfully in its readiness.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from typing import Any

import nats.errors
from nexus_events.contract import subjects
from nexus_events.contract.streams import CATALOG, RUNS, TASKS
from nexus_events.events import DeadLetter, TaskCreated
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_testing import dead_letters, http_status

from nexus_core.app import CoreApp

from .support import AGENT_YAML, eventually, query

# Close to the server's default 1 MiB max_payload: a dead letter that copied it whole (plus
# headers and the reason) could not be published.
HUGE = 900 * 1024


async def _letters_for(bus: Bus, seqs: dict[str, int]) -> list[DeadLetter]:
    wanted = set(seqs.items())
    return [x for x in await dead_letters(bus) if (x.stream, x.stream_seq) in wanted]


async def test_huge_undecodable_bodies_do_not_wedge_the_projections(bus: Bus, core: CoreApp):
    blob = os.urandom(HUGE)
    poison = {
        CATALOG: "nexus.catalog.v1.agent.x.applied",
        TASKS: "nexus.task.v1.T-huge.created",
        RUNS: "nexus.agent.run.v1.r-huge.turn",
    }
    seqs = {}
    for stream, subject in poison.items():
        ack = await bus.js.publish(subject, blob)
        assert ack.stream == stream
        seqs[stream] = ack.seq

    # Valid events after the poison still reach every projection.
    await apply_agent(bus, AGENT_YAML)
    await bus.publish(subjects.task_event("T-after", "created"), TaskCreated(title="after"))
    await bus.js.publish(
        subjects.run_event("r-after", "requested"),
        json.dumps({"agent_id": "implementer", "input": "go"}).encode(),
    )

    async def catalog_has_agent() -> Any:
        assert core.catalog is not None
        return await core.catalog.get_agent("implementer")

    await eventually(catalog_has_agent, within=20)

    async def board() -> Any:
        return (await query(bus, "nexus.core.v1.board.get", {}))[1]

    await eventually(board, lambda b: "T-after" in json.dumps(b), within=20)
    _, run = await eventually(
        lambda: query(bus, "nexus.core.v1.runs.get", {"run_id": "r-after"}),
        lambda r: r[0] is None,
        within=20,
    )
    assert run["run_id"] == "r-after"

    # Each huge body is dead-lettered once (by whichever of core's consumers of its stream met
    # it first), truncated, with its size and digest to tell it by.
    await eventually(
        lambda: _letters_for(bus, seqs), lambda xs: {x.stream for x in xs} == set(seqs), within=20
    )
    await _consumers_idle(bus, set(seqs))
    letters = await _letters_for(bus, seqs)
    assert sorted((x.stream, x.stream_seq) for x in letters) == sorted(seqs.items())
    digest = hashlib.sha256(blob).hexdigest()
    for letter in letters:
        assert letter.body_truncated is True
        assert letter.body_size == HUGE
        assert letter.body_sha256 == digest
        assert letter.reason == "undecodable"
    assert core.ready()
    assert core.health is not None
    assert await http_status(core.health.port, "/readyz") == 200


async def _consumers_idle(bus: Bus, streams: set[str]) -> None:
    """Until every durable on `streams` has nothing pending or unacknowledged: every consumer
    that would dead-letter a message has met it."""

    async def idle() -> bool:
        for stream in streams:
            for info in await bus.js.consumers_info(stream):
                durable = info.config.durable_name is not None
                if durable and (info.num_pending or info.num_ack_pending):
                    return False
        return True

    await eventually(idle, within=20, what=f"the consumers of {sorted(streams)} idle")


# Invalid messages of every kind an operator can publish on the streams core reads; each is
# rejected by every one of core's consumers that reads it, and dead-lettered exactly once.
_INVALID: list[tuple[str, str, bytes]] = [
    (CATALOG, "nexus.catalog.v1.agent.bad-utf8.applied", b'{"definition": "\xff\xfe"}'),
    (CATALOG, "nexus.catalog.v1.agent.x.exploded", b"{}"),
    (CATALOG, "nexus.catalog.v1.agent.x.y.applied", b"{}"),
    (CATALOG, "nexus.catalog.v1.agent.applied", b"{}"),
    (CATALOG, "nexus.catalog.v1.agent.x.applied", b"[1, 2]"),
    (TASKS, "nexus.task.v1.T-bad.created", b'{"title": "\xc3\x28"}'),
    (TASKS, "nexus.task.v1.T-bad.created.extra", b"{}"),
    (TASKS, "nexus.task.v1.T-bad.vanished", b"{}"),
    (RUNS, "nexus.agent.run.v1.r-bad.turn", b"\xff" * 10),
    (RUNS, "nexus.agent.run.v1.r-bad.exploded", b"{}"),
]


async def test_every_invalid_message_is_dead_lettered_once(bus: Bus, core: CoreApp):
    published: list[tuple[str, int]] = []
    for stream, subject, body in _INVALID:
        try:
            ack = await bus.js.publish(subject, body)
        except nats.errors.Error as exc:  # pragma: no cover - the stream must store them all
            raise AssertionError(f"{subject} was not stored: {exc}") from exc
        assert ack.stream == stream, subject
        published.append((stream, ack.seq))
    await bus.publish(subjects.task_event("T-good", "created"), TaskCreated(title="good"))

    async def seen() -> Counter[tuple[str | None, int | None]]:
        return Counter((x.stream, x.stream_seq) for x in await dead_letters(bus))

    await eventually(seen, lambda c: all(c[k] >= 1 for k in published), within=20)
    # Core reads NEXUS_RUNS with several consumers (views, assembly, metrics...): all of them
    # reject the RUNS poison, one letter is kept.
    await _consumers_idle(bus, {CATALOG, TASKS, RUNS})
    got = await seen()
    for key in published:
        assert got[key] == 1, f"{key} dead-lettered {got[key]} times"
    # The valid task after the burst is on the board.
    await eventually(
        lambda: query(bus, "nexus.core.v1.board.get", {}),
        lambda r: "T-good" in json.dumps(r[1]),
        within=20,
    )
