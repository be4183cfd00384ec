"""Checks a lab run's source run before it is assembled: the run is known, a fork's turn is
within it, and its transcript is still in NEXUS_TRANSCRIPTS (docs/lab.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
from nats.js import JetStreamContext
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, TRANSCRIPTS
from nexus_events.events import Reason
from nexus_events.events.lab_specs import LabMode, LabSpec
from nexus_events.events.specs import RepoSpec
from nexus_events.transport.projection import quote_ident

from nexus_core.assembly import AssemblyFailure
from nexus_core.lab_assembly import LabSource
from nexus_core.run_state import RunRow
from nexus_core.runs_projection import RUNS_SCHEMA

SECONDS_PER_DAY = 86400


def unusable(lab: LabSpec, message: str) -> AssemblyFailure:
    return AssemblyFailure(
        Reason.LAB_SOURCE_UNUSABLE,
        message,
        {"source_run_id": lab.source_run_id, "mode": lab.mode.value},
    )


class SourceNotProjected(AssemblyFailure):
    """A source NEXUS_RUNS holds but agent_runs does not show yet: the handler retries the
    request while the projection catches up, and fails it only when retries run out."""


@dataclass
class LabSourceReader:
    """Reads a lab run's source from agent_runs and counts its transcript entries in
    NEXUS_TRANSCRIPTS (stream info filtered to its subject: metadata, never the content)."""

    pool: asyncpg.Pool[Any]
    js: JetStreamContext
    runs_schema: str = RUNS_SCHEMA

    async def read(self, lab: LabSpec, agent_id: str) -> LabSource | AssemblyFailure:
        """The source of a lab run of `agent_id`, or why it cannot be used."""
        source_id = lab.source_run_id
        doc = await self.pool.fetchval(
            f"SELECT doc FROM {quote_ident(self.runs_schema)}.agent_runs WHERE run_id = $1",  # noqa: S608 - a quoted identifier
            source_id,
        )
        if doc is None:
            if await self._in_stream(source_id):
                return SourceNotProjected(
                    Reason.LAB_SOURCE_UNUSABLE,
                    f"run {source_id!r} is not in agent_runs yet; try again",
                    {"source_run_id": source_id, "mode": lab.mode.value},
                )
            return unusable(lab, f"no run {source_id!r}")
        row = RunRow.from_json(doc)
        if row.agent_id != agent_id:
            # A lab run reads its source's model-visible transcript (secrets a tool showed
            # the model included): only another revision of the same agent may, never an
            # agent with other tools or grants.
            return unusable(
                lab,
                f"run {source_id!r} is a run of agent {row.agent_id!r}; a replay or fork of it"
                f" runs {row.agent_id!r} too, not {agent_id!r}",
            )
        turns = row.turn_count
        if lab.mode is LabMode.FORK and lab.at_turn is not None and lab.at_turn > turns:
            return unusable(
                lab, f"run {source_id!r} has {turns} turns; cannot fork at turn {lab.at_turn}"
            )
        entries, keep_days = await self._transcript(source_id)
        if entries == 0:
            return unusable(
                lab,
                f"the transcript of run {source_id!r} has expired"
                f" (NEXUS_TRANSCRIPTS keeps {keep_days} days)",
            )
        return LabSource(
            run_id=source_id,
            repo=None if row.repo is None else RepoSpec.model_validate(row.repo),
            base_commit=row.base_commit,
            task_id=row.task_id,
            input=row.input or "",
            turns=turns,
        )

    async def _in_stream(self, run_id: str) -> bool:
        """Whether NEXUS_RUNS holds any event of the run (stream info: metadata only)."""
        info = await self.js.stream_info(RUNS, subjects_filter=subjects.run_events_filter(run_id))
        return bool(info.state.subjects)

    async def _transcript(self, run_id: str) -> tuple[int, str]:
        """(entries of the run's transcript subject, how many days the stream keeps)."""
        subject = subjects.run_transcript(run_id)
        info = await self.js.stream_info(TRANSCRIPTS, subjects_filter=subject)
        entries = (info.state.subjects or {}).get(subject, 0)
        max_age = info.config.max_age or 0
        keep = "unlimited" if max_age <= 0 else f"{max_age / SECONDS_PER_DAY:g}"
        return entries, keep
