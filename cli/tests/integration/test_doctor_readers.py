"""`nexus doctor` names the streams no durable consumer reads (issue 29, defect 2): an invalid
message there is stored and never dead-lettered, so the operator must be told."""

from __future__ import annotations

from nexus_events.contract.streams import DLQ, INBOX, LOGS, RUNS
from nexus_events.transport.bus import Bus, ConsumerSpec
from nexus_events.transport.consume import ensure_durable

from nexus_cli.commands.doctor import Check, _nats_checks


async def test_streams_without_a_durable_reader_are_named(bus: Bus) -> None:
    await ensure_durable(bus.js, ConsumerSpec(stream=RUNS, durable="someone_reads_runs"))
    checks: list[Check] = []
    await _nats_checks(bus, checks)
    streams = {c.name.removeprefix("stream "): c for c in checks if c.name.startswith("stream ")}
    assert streams[RUNS].level == "ok"
    assert "no durable reader" not in streams[RUNS].detail
    # Nobody reads NEXUS_INBOX on this bare server (core's sweeper would): a warning.
    assert streams[INBOX].level == "warn"
    assert "no durable reader" in streams[INBOX].detail
    assert "never dead-lettered" in streams[INBOX].detail
    # The dead-letter sink and the runners' log lines have none by design: named, not warned.
    for stream in (DLQ, LOGS):
        assert streams[stream].level == "ok"
        assert "no durable reader" in streams[stream].detail
