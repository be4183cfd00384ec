"""Extraction: after a run ends, ask the run's model what is worth remembering.

A durable consumer on NEXUS_RUNS takes the configured terminal events (completed, failed).
For each run not extracted yet, the run's events are replayed (one subject-filtered replay),
the transcript (task, outcome, result, tools used) goes to the run's model over the
OpenAI-compatible chat API with a fixed instruction, and every memory in its JSON answer is
recorded through `MemoryWriter` (so the secret guard sees it) with `source_run_id` and an id
derived from the run and its position. Last, an `extracted` event marks the run done.

Idempotent: a redelivered terminal event finds the run in `extractions` (or, inside the
stream's duplicate window, its events are deduplicated by their ids), so a run never records
twice. A model that is down is retried on later deliveries; after the last one the run is
marked `failed` rather than blocking the consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, cast

import asyncpg
import openai
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import RUNS
from nexus_events.errors import InvalidSubject
from nexus_events.events import (
    MemoryExtracted,
    MemoryRecordRequest,
    Origin,
    RunConfig,
    RunPrepared,
    TerminalEvent,
    ToolCalled,
    scope_token,
)
from nexus_events.events.base import Event
from nexus_events.transport.bus import Bus, ConsumerSpec
from nexus_events.transport.fast import Delivered, Retry
from nexus_events.transport.projection import quote_ident
from openai import AsyncOpenAI
from pydantic import BaseModel, Field, ValidationError

from nexus_memory.metrics import MemoryMetrics
from nexus_memory.projection import MEMORY_SCHEMA
from nexus_memory.writer import MemoryWriter, SecretBlocked

log = logging.getLogger(__name__)

# The marker the offline model server recognises (cli/src/nexus_cli/devstack/offline_model/).
MARKER = "[nexus-memory-extraction]"
INSTRUCTION = (
    MARKER
    + """
You maintain the long-term memory of a team of software agents. From the finished run below,
pick at most {limit} durable facts worth knowing in future runs: how this project builds and
tests, conventions, decisions taken and why, pitfalls found. Skip anything specific to this
one run only, anything obvious, and never include credentials or secrets.
Answer with JSON only: {{"memories": [{{"text": "...", "kind": "fact|decision|preference|\
observation", "scope": "agent|task|repo|global"}}]}}. Answer {{"memories": []}} when nothing
is worth keeping."""
)
TRANSCRIPT_CAP = 12000
DELIVERIES = 5
# Run ids remembered as extracted by this process: far more than the endings that can be in
# flight at once; the table answers for older ones.
FINISHED_KEPT = 10_000


class Candidate(BaseModel):
    text: str = Field(..., min_length=1, max_length=2000)
    kind: str = "fact"
    scope: str = "agent"


class Answer(BaseModel):
    memories: list[Candidate] = Field(default_factory=list)


@dataclass
class RunTranscript:
    run_id: str
    config: RunConfig | None = None
    terminal: TerminalEvent | None = None
    status: str = ""
    tools: list[str] = field(default_factory=list)

    def text(self) -> str:
        c, t = self.config, self.terminal
        lines = [f"Run: {self.run_id}", f"Outcome: {self.status}"]
        if c is not None:
            lines += [f"Agent: {c.agent_id}", f"Task: {c.task_id or '-'}"]
            if c.repo is not None:
                lines.append(f"Repository: {c.repo.url}")
            lines.append(f"Input: {c.input or '-'}")
        if t is not None:
            body = t.model_dump(mode="json", exclude_none=True)
            lines.append(f"Result: {json.dumps(body)[:4000]}")
        if self.tools:
            lines.append("Tools used: " + ", ".join(self.tools[-60:]))
        return "\n".join(lines)[:TRANSCRIPT_CAP]


def extraction_spec(durable: str, events: list[str], fetch_timeout: float = 1.0) -> ConsumerSpec:
    return ConsumerSpec(
        stream=RUNS,
        durable=durable,
        # The names come from settings (NEXUS_MEMORY_EXTRACTION_EVENTS): checked here.
        filter_subjects=tuple(
            subjects.run_events_filter(None, subjects.run_event_named(e)) for e in events
        ),
        batch=10,
        max_deliver=DELIVERIES + 1,
        backoff=(5.0, 15.0, 60.0),
        ack_wait=120.0,
        fetch_timeout=fetch_timeout,
    )


def parse_answer(content: str) -> Answer:
    """The model's JSON, also when wrapped in a code fence or prose; empty when unreadable."""
    found = re.search(r"\{.*\}", content, re.DOTALL)
    if found is None:
        return Answer()
    try:
        return Answer.model_validate_json(found.group(0))
    except ValidationError:
        return Answer()


def memory_scope(kind: str, config: RunConfig) -> str:
    """The scope token a candidate's scope word means for this run (agent when unknown)."""
    with contextlib.suppress(InvalidSubject):
        if kind == "task" and config.task_id:
            return scope_token("task", config.task_id)
        if kind == "repo" and config.repo is not None:
            return scope_token("repo", config.repo.url)
        if kind == "global":
            return scope_token("global")
    return scope_token("agent", config.agent_id)


def candidate_id(run_id: str, index: int) -> str:
    digest = hashlib.blake2b(f"{run_id}:{index}".encode(), digest_size=10).hexdigest()
    return f"mem-x{digest}"


class Extractor:
    """The extraction consumer's FastStream handler (`on_ending`, see
    `nexus_events.transport.fast`)."""

    def __init__(
        self,
        bus: Bus,
        pool: asyncpg.Pool[Any],
        writer: MemoryWriter,
        metrics: MemoryMetrics,
        *,
        default_base_url: str | None,
        api_key: str,
        timeout: float,
        limit: int,
        schema: str = MEMORY_SCHEMA,
    ) -> None:
        self.bus = bus
        self.pool = pool
        self.writer = writer
        self.metrics = metrics
        self.default_base_url = default_base_url
        self.api_key = api_key
        self.timeout = timeout
        self.limit = limit
        self.table = f"{quote_ident(schema)}.extractions"
        self._clients: dict[str | None, AsyncOpenAI] = {}
        # Runs this process extracted: a second copy of an ending that arrives before the
        # projection has applied the first one's `extracted` is recognised here (bounded).
        self._finished: OrderedDict[str, None] = OrderedDict()
        # The messages of one fetch are handled concurrently: two copies of one run's ending
        # wait for each other here, so the second finds the run done (one model call).
        self._extracting: dict[str, tuple[asyncio.Lock, int]] = {}

    async def on_ending(self, event: Event, delivered: Delivered) -> None:
        run_id = delivered.address.run_id
        if run_id is None or not isinstance(event, TerminalEvent):
            return
        lock, users = self._extracting.get(run_id, (asyncio.Lock(), 0))
        self._extracting[run_id] = (lock, users + 1)
        try:
            async with lock:
                await self.extract(run_id, delivered)
        finally:
            lock, users = self._extracting[run_id]
            if users == 1:
                del self._extracting[run_id]
            else:
                self._extracting[run_id] = (lock, users - 1)

    async def extract(self, run_id: str, d: Decoded) -> None:
        if run_id in self._finished or await self.pool.fetchval(
            f"SELECT 1 FROM {self.table} WHERE run_id = $1", run_id
        ):
            return
        transcript = await self.transcript(run_id)
        if transcript.config is None:  # never assembled (unknown agent): nothing was done
            return
        config = transcript.config
        if config.lab is not None or config.origin is Origin.LAB:
            # A replay, a fork or an eval case (docs/lab.md) repeats or varies a run on
            # purpose: what it did is no fact about the team's work to remember.
            await self._done(config, run_id, [], 0, "nothing")
            return
        try:
            answer = await self.ask(config, transcript)
        except (openai.APIError, TimeoutError) as exc:
            if d.envelope.num_delivered < DELIVERIES:
                log.warning("extraction of %s: model unavailable (%s), retrying", run_id, exc)
                raise Retry(reason=f"model unavailable: {exc}") from None
            await self._done(config, run_id, [], 0, "failed", error=str(exc)[:500])
            return
        recorded: list[str] = []
        blocked = 0
        for i, c in enumerate(answer.memories[: self.limit]):
            request = MemoryRecordRequest(
                text=c.text,
                scope=memory_scope(c.scope, config),
                kind=c.kind if re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", c.kind) else "fact",
                source="extraction",
                source_run_id=run_id,
                memory_id=candidate_id(run_id, i),
            )
            try:
                reply = await self.writer.record(request)
            except SecretBlocked:
                blocked += 1
                continue
            recorded.append(reply.memory_id)
        await self._done(config, run_id, recorded, blocked, "recorded" if recorded else "nothing")

    async def _done(
        self,
        config: RunConfig,
        run_id: str,
        recorded: list[str],
        blocked: int,
        status: str,
        *,
        error: str | None = None,
    ) -> None:
        await self.bus.publish(
            subjects.memory_event(scope_token("agent", config.agent_id), "extracted"),
            MemoryExtracted(
                run_id=run_id,
                memory_ids=recorded,
                blocked=blocked,
                model=config.model.name,
                status=status,
                error=error,
            ),
            msg_id=f"memory-extracted-{run_id}",
        )
        self._finished[run_id] = None
        while len(self._finished) > FINISHED_KEPT:
            self._finished.popitem(last=False)
        self.metrics.extraction(status)
        log.info(
            "extraction of %s: %s (%d recorded, %d blocked)", run_id, status, len(recorded), blocked
        )

    async def transcript(self, run_id: str) -> RunTranscript:
        out = RunTranscript(run_id)
        replay = cast(AsyncGenerator[Decoded, None], self.bus.replay(RUNS, run_id=run_id))
        async with contextlib.aclosing(replay) as events:
            async for d in events:
                e = d.event
                if isinstance(e, RunPrepared):
                    out.config = e.config
                elif isinstance(e, ToolCalled):
                    out.tools.append(e.tool)
                elif isinstance(e, TerminalEvent):
                    out.terminal = e
                    out.status = d.address.event or ""
        return out

    def _client(self, base_url: str | None) -> AsyncOpenAI:
        if base_url not in self._clients:
            self._clients[base_url] = AsyncOpenAI(
                base_url=base_url, api_key=self.api_key, timeout=self.timeout, max_retries=2
            )
        return self._clients[base_url]

    async def ask(self, config: RunConfig, transcript: RunTranscript) -> Answer:
        client = self._client(config.model.base_url or self.default_base_url)
        reply = await client.chat.completions.create(
            model=config.model.name,
            messages=[
                {"role": "system", "content": INSTRUCTION.format(limit=self.limit)},
                {"role": "user", "content": transcript.text()},
            ],
            temperature=0,
        )
        content = reply.choices[0].message.content or "" if reply.choices else ""
        return parse_answer(content)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
