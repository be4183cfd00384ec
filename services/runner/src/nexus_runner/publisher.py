"""Publishes a run's events and log lines, with deterministic message ids."""

from __future__ import annotations

import itertools

from nexus_events import subjects
from nexus_events.bus import Bus
from nexus_events.events.base import Event
from nexus_events.events.logs import LogLine

from nexus_runner.safety import redact


class RunPublisher:
    """Events of one run attempt: ``<run_id>:<attempt>:<event>:<n>`` ids make retries safe."""

    def __init__(self, bus: Bus, run_id: str, attempt: int) -> None:
        self.bus = bus
        self.run_id = run_id
        self.attempt = attempt
        self._counter = itertools.count(1)
        self._log_seq = itertools.count(0)

    async def event(self, event: Event) -> None:
        name = type(event).event_name
        msg_id = f"{self.run_id}:{self.attempt}:{name}:{next(self._counter)}"
        await self.bus.publish(subjects.run_event(self.run_id, name), event, msg_id=msg_id)

    async def log(self, stream: str, text: str, turn: int | None = None) -> None:
        seq = next(self._log_seq)
        line = LogLine(seq=seq, stream=stream, text=redact(text), turn=turn)
        await self.bus.publish(
            subjects.run_log(self.run_id), line, msg_id=f"{self.run_id}:{self.attempt}:log:{seq}"
        )
