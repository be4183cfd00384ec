"""Stream provisioning against a real nats-server."""

from __future__ import annotations

import dataclasses

import nats.errors
import nats.js.errors
import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import (
    DAY,
    DLQ,
    MEMORY,
    RUNS,
    StreamSettings,
    ensure_streams,
    stream_configs,
)
from nexus_events.events import MemoryRecorded
from nexus_events.transport.bus import Bus, BusSettings

ALL = {
    "NEXUS_RUNS", "NEXUS_LOGS", "NEXUS_TASKS", "NEXUS_CATALOG", "NEXUS_INBOX",
    "NEXUS_SCHEDULES", "NEXUS_MEMORY", "NEXUS_CHANNELS", "NEXUS_PLANE", "NEXUS_FLOWS",
    "NEXUS_TRANSCRIPTS", "NEXUS_EVALS", "NEXUS_BUDGETS", "NEXUS_DLQ",
}  # fmt: skip


@pytest.fixture
async def raw_bus(nats_url: str):
    """A bus whose streams are NOT ensured yet."""
    b = await Bus.connect(BusSettings(url=nats_url, connect_attempts=1), source="streams-test")
    try:
        yield b
    finally:
        await b.close()


async def test_creates_all_fourteen_then_reports_unchanged(raw_bus: Bus):
    first = await ensure_streams(raw_bus.js)
    assert set(first.created) == ALL
    assert len(first.created) == 14
    assert first.unchanged == []
    assert not first.drifted

    names = {info.config.name for info in await raw_bus.js.streams_info()}
    assert names == ALL
    for wanted in stream_configs():
        live = (await raw_bus.js.stream_info(wanted.name)).config
        assert sorted(live.subjects) == sorted(wanted.subjects)
        # A day for dead letters (a restarting consumer files each original once), 2 min else.
        window = 86_400.0 if wanted.name == DLQ else 120.0
        assert live.duplicate_window == pytest.approx(window)

    second = await ensure_streams(raw_bus.js)
    assert second.created == []
    assert second.updated == {}
    assert set(second.unchanged) == ALL


async def test_stream_changed_by_hand_is_reported_and_fixed(raw_bus: Bus):
    await ensure_streams(raw_bus.js)
    live = (await raw_bus.js.stream_info(RUNS)).config
    assert live.max_age == pytest.approx(90 * DAY)
    await raw_bus.js.update_stream(dataclasses.replace(live, max_age=3600.0))
    assert (await raw_bus.js.stream_info(RUNS)).config.max_age == pytest.approx(3600.0)

    report = await ensure_streams(raw_bus.js)
    assert list(report.updated) == [RUNS]
    have, want = report.updated[RUNS]["max_age"]
    assert (have, want) == (pytest.approx(3600.0), pytest.approx(90 * DAY))
    assert set(report.unchanged) == ALL - {RUNS}
    assert (await raw_bus.js.stream_info(RUNS)).config.max_age == pytest.approx(90 * DAY)

    again = await ensure_streams(raw_bus.js)
    assert set(again.unchanged) == ALL


async def test_settings_change_updates_the_stream(raw_bus: Bus):
    await ensure_streams(raw_bus.js)
    report = await ensure_streams(raw_bus.js, StreamSettings(runs_max_age_days=1))
    assert list(report.updated) == [RUNS]
    assert (await raw_bus.js.stream_info(RUNS)).config.max_age == pytest.approx(DAY)


async def test_memory_stream_does_not_capture_search_requests(bus: Bus):
    # A memory event is stored...
    ack = await bus.publish(
        subjects.memory_event("agent-x", "recorded"), MemoryRecorded(memory_id="m1", text="t")
    )
    assert ack.stream == MEMORY
    # ...but a search request is not: no stream answers it with a PubAck.
    with pytest.raises(nats.errors.NoRespondersError):
        await bus.nc.request(subjects.MEMORY_SEARCH, b'{"query": "x"}', timeout=2)
    with pytest.raises(nats.js.errors.NoStreamResponseError):
        await bus.js.publish(subjects.MEMORY_SEARCH, b'{"query": "x"}', timeout=2)
    info = await bus.js.stream_info(MEMORY)
    assert info.state.messages == 1
    with pytest.raises(nats.js.errors.NotFoundError):
        await bus.js.find_stream_name_by_subject(subjects.MEMORY_SEARCH)
    for query in subjects.QUERY_SUBJECTS:
        with pytest.raises(nats.js.errors.NotFoundError):
            await bus.js.find_stream_name_by_subject(query)


async def test_an_update_keeps_fields_it_does_not_manage(raw_bus: Bus):
    """Before: the whole wanted config was sent, resetting e.g. an operator's max_msg_size."""
    await ensure_streams(raw_bus.js)
    live = (await raw_bus.js.stream_info(RUNS)).config
    await raw_bus.js.update_stream(dataclasses.replace(live, max_msg_size=4096, max_age=3600.0))
    report = await ensure_streams(raw_bus.js)
    assert list(report.updated) == [RUNS]
    now = (await raw_bus.js.stream_info(RUNS)).config
    assert now.max_age == pytest.approx(90 * DAY)
    assert now.max_msg_size == 4096


async def test_a_service_that_does_not_own_streams_creates_but_never_changes(raw_bus: Bus):
    """Services started with different environments cannot overwrite the owner's retention."""
    owner = await ensure_streams(raw_bus.js, StreamSettings(runs_max_age_days=7))
    assert set(owner.created) == ALL
    other = await ensure_streams(raw_bus.js, StreamSettings(runs_max_age_days=1), update=False)
    assert other.updated == {}
    assert list(other.left) == [RUNS]
    assert other.drifted
    assert (await raw_bus.js.stream_info(RUNS)).config.max_age == pytest.approx(7 * DAY)
    # A missing stream is still created by anyone.
    await raw_bus.js.delete_stream(DLQ)
    again = await ensure_streams(raw_bus.js, update=False)
    assert again.created == [DLQ]
