"""The JetStream streams of the contract (docs/design.md §3) and `ensure_streams()`.

Streams are provisioned here and only here (services declare them `declare=False` in
FastStream). `ensure_streams` is idempotent: it creates what is missing, updates what has
drifted, and reports what it did; a drift the server cannot apply (a storage change) raises.

One owner sets stream settings: core calls `ensure_streams(js, settings)` and its
`NEXUS_STREAMS_*` environment decides retention. Every other service calls it with
`update=False`: it creates a missing stream (so start-up order does not matter) but never
changes a live one, so services started with different environments cannot overwrite each
other. An update changes only the managed fields (`_MANAGED`); everything else on the live
stream (max_msg_size, sealed, mirrors, placement, ...) is sent back as it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig, StreamInfo
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from nexus_events.contract import subjects
from nexus_events.contract.subjects import Family
from nexus_events.errors import BusError, InvalidSubject, StreamDrift

log = logging.getLogger(__name__)

DAY = 86_400.0
# JetStream drops a repeated Nats-Msg-Id within this window; 2 min covers client retries.
DUPLICATE_WINDOW_SECONDS = 120.0
# Dead letters are keyed per original, consumer and reason; a day of dedupe keeps a service
# that restarts in a loop from filing the same original again and again (they are few).
DLQ_DUPLICATE_WINDOW_SECONDS = DAY

RUNS = "NEXUS_RUNS"
LOGS = "NEXUS_LOGS"
TASKS = "NEXUS_TASKS"
CATALOG = "NEXUS_CATALOG"
INBOX = "NEXUS_INBOX"
SCHEDULES = "NEXUS_SCHEDULES"
MEMORY = "NEXUS_MEMORY"
CHANNELS = "NEXUS_CHANNELS"
PLANE = "NEXUS_PLANE"
FLOWS = "NEXUS_FLOWS"
TRANSCRIPTS = "NEXUS_TRANSCRIPTS"
EVALS = "NEXUS_EVALS"
BUDGETS = "NEXUS_BUDGETS"
DLQ = "NEXUS_DLQ"
# Object store bucket of workspace checkpoints (git bundles), one object per checkpoint named
# `<run_id>/<attempt>-<turn>` (docs/resume.md). Its TTL is NEXUS_STREAMS_TRANSCRIPTS_MAX_AGE_DAYS.
CHECKPOINTS_BUCKET = "nexus_checkpoints"

STREAM_OF_FAMILY: dict[Family, str] = {
    Family.RUN: RUNS,
    Family.LOG: LOGS,
    Family.TASK: TASKS,
    Family.CATALOG: CATALOG,
    Family.INBOX: INBOX,
    Family.ROUTE: INBOX,
    Family.SCHEDULE: SCHEDULES,
    Family.MEMORY: MEMORY,
    Family.CHANNEL: CHANNELS,
    Family.PLANE: PLANE,
    Family.FLOW: FLOWS,
    Family.TRANSCRIPT: TRANSCRIPTS,
    Family.EVAL: EVALS,
    Family.BUDGET: BUDGETS,
    Family.DLQ: DLQ,
}


class StreamSettings(BaseSettings):
    """Retention of each stream; 0 means keep forever. Env: NEXUS_STREAMS_<FIELD>."""

    model_config = SettingsConfigDict(env_prefix="NEXUS_STREAMS_", extra="ignore")

    replicas: int = Field(1, ge=1, le=5, description="JetStream replicas per stream.")
    runs_max_age_days: float = Field(90, ge=0)
    runs_max_bytes: int = Field(-1, description="-1 = unlimited.")
    logs_max_age_days: float = Field(3, ge=0)
    logs_max_bytes: int = Field(1 << 30, description="Logs are size-capped: 1 GiB default.")
    tasks_max_age_days: float = Field(365, ge=0)
    inbox_max_age_days: float = Field(7, ge=0)
    memory_max_age_days: float = Field(365, ge=0)
    channels_max_age_days: float = Field(7, ge=0)
    plane_max_age_days: float = Field(30, ge=0)
    flows_max_age_days: float = Field(90, ge=0, description="Flow runs: as long as runs.")
    transcripts_max_age_days: float = Field(
        7,
        ge=0,
        description="Run transcripts and workspace checkpoints: what a resume needs, so at"
        " least the longest run; older runs cannot be resumed (resume_failed).",
    )
    transcripts_max_bytes: int = Field(8 << 30, description="Transcripts: 8 GiB default.")
    evals_max_age_days: float = Field(
        365, ge=0, description="Eval runs: their reports are rebuilt from them."
    )
    budgets_max_age_days: float = Field(
        400, ge=0, description="Budget asks, extensions and thresholds: a year of periods."
    )
    dlq_max_age_days: float = Field(30, ge=0)
    dlq_max_bytes: int = Field(-1)


def stream_configs(settings: StreamSettings | None = None) -> list[StreamConfig]:
    """The configs of every Nexus stream, from `settings` (defaults if None)."""
    s = settings or StreamSettings()

    def cfg(
        name: str,
        families: list[Family],
        max_age_days: float,
        max_bytes: int = -1,
        duplicate_window: float = DUPLICATE_WINDOW_SECONDS,
    ) -> StreamConfig:
        return StreamConfig(
            name=name,
            subjects=[_stored_subjects(f) for f in families],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            discard=DiscardPolicy.OLD,
            max_age=max_age_days * DAY,
            max_bytes=max_bytes,
            duplicate_window=duplicate_window,
            num_replicas=s.replicas,
        )

    return [
        cfg(RUNS, [Family.RUN], s.runs_max_age_days, s.runs_max_bytes),
        cfg(LOGS, [Family.LOG], s.logs_max_age_days, s.logs_max_bytes),
        cfg(TASKS, [Family.TASK], s.tasks_max_age_days),
        cfg(CATALOG, [Family.CATALOG], 0),
        cfg(INBOX, [Family.INBOX, Family.ROUTE], s.inbox_max_age_days),
        cfg(SCHEDULES, [Family.SCHEDULE], 0),
        cfg(MEMORY, [Family.MEMORY], s.memory_max_age_days),
        cfg(CHANNELS, [Family.CHANNEL], s.channels_max_age_days),
        # Webhook deliveries are deduped by their id (Nats-Msg-Id) beyond the window too:
        # plane-sync keeps the ids it saw in PostgreSQL.
        cfg(PLANE, [Family.PLANE], s.plane_max_age_days),
        cfg(FLOWS, [Family.FLOW], s.flows_max_age_days),
        cfg(
            TRANSCRIPTS,
            [Family.TRANSCRIPT],
            s.transcripts_max_age_days,
            s.transcripts_max_bytes,
        ),
        cfg(EVALS, [Family.EVAL], s.evals_max_age_days),
        cfg(BUDGETS, [Family.BUDGET], s.budgets_max_age_days),
        cfg(
            DLQ,
            [Family.DLQ],
            s.dlq_max_age_days,
            s.dlq_max_bytes,
            # JetStream refuses a dedupe window longer than max_age.
            duplicate_window=min(DLQ_DUPLICATE_WINDOW_SECONDS, s.dlq_max_age_days * DAY)
            if s.dlq_max_age_days
            else DLQ_DUPLICATE_WINDOW_SECONDS,
        ),
    ]


def _stored_subjects(family: Family) -> str:
    # `nexus.memory.v1.search` is a request/reply subject: a `>` filter would store requests
    # and answer them with a PubAck, so memory events are matched token by token.
    if family is Family.MEMORY:
        return "nexus.memory.v1.*.*"
    if family is Family.PLANE:  # likewise nexus.plane.v1.status and .resync
        return "nexus.plane.v1.*.*"
    return subjects.family_filter(family)


# The fields this module owns; anything else on a live stream (sealed, mirrors, ...) is left.
_MANAGED = (
    "subjects",
    "retention",
    "storage",
    "discard",
    "max_age",
    "max_bytes",
    "duplicate_window",
    "num_replicas",
)


@dataclass
class EnsureReport:
    """What `ensure_streams` did, stream by stream."""

    created: list[str] = field(default_factory=list)
    updated: dict[str, dict[str, tuple[Any, Any]]] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    # Drifted streams left as they are (`update=False`: not this caller's to change).
    left: dict[str, dict[str, tuple[Any, Any]]] = field(default_factory=dict)

    @property
    def drifted(self) -> bool:
        return bool(self.updated or self.left)


def _normalize(name: str, value: Any) -> Any:
    if name == "subjects":
        return sorted(value or [])
    if name in ("max_age", "duplicate_window"):
        return round(float(value or 0), 3)
    if hasattr(value, "value"):
        return value.value
    return value


def drift(live: StreamConfig, wanted: StreamConfig) -> dict[str, tuple[Any, Any]]:
    """Managed fields whose live value differs: {field: (live, wanted)}."""
    out = {}
    for name in _MANAGED:
        have, want = _normalize(name, getattr(live, name)), _normalize(name, getattr(wanted, name))
        if have != want:
            out[name] = (have, want)
    return out


# JetStream's answers when a stream cannot have the replicas asked for: a server that is not
# clustered (10074), or fewer suitable nodes than replicas (10005 no suitable peers for
# placement, 10023 insufficient resources).
_REPLICA_ERRORS = frozenset({10074, 10005, 10023})


def _explain(exc: APIError, wanted: StreamConfig) -> str:
    replicas = wanted.num_replicas or 1
    if replicas > 1 and exc.err_code in _REPLICA_ERRORS:
        return (
            f"{exc.description} (err_code {exc.err_code}): NEXUS_STREAMS_REPLICAS={replicas}"
            f" needs a JetStream cluster with at least {replicas} nodes up"
        )
    return str(exc)


async def ensure_streams(
    js: JetStreamContext, settings: StreamSettings | None = None, *, update: bool = True
) -> EnsureReport:
    """Create every missing Nexus stream and, with `update` (the owner, core), bring the
    managed fields of live ones to `settings`; idempotent.

    With `update=False` a drifted stream is reported in `EnsureReport.drifted` only. A
    changed replica count is an update like any other: on a cluster, JetStream scales a live
    stream (R1 to R3, or back) in place, keeping its messages. Raises `StreamDrift` when a
    live stream differs in a way JetStream cannot update (storage; more replicas than the
    cluster has nodes), and `BusError` for other server errors (e.g. replicas on a server
    that is not clustered).
    """
    report = EnsureReport()
    for wanted in stream_configs(settings):
        name = wanted.name
        assert name is not None
        try:
            info = await js.stream_info(name)
        except NotFoundError:
            try:
                await js.add_stream(wanted)
            except APIError as exc:
                # Another service created it meanwhile (services start together): it is
                # live now, so go on as with any live stream.
                try:
                    info = await js.stream_info(name)
                except NotFoundError:
                    raise BusError(f"cannot create stream {name}: {_explain(exc, wanted)}") from exc
            else:
                report.created.append(name)
                log.info("stream created", extra={"stream": name})
                continue
        diff = drift(info.config, wanted)
        if not diff:
            report.unchanged.append(name)
            continue
        if not update:
            report.left[name] = diff
            continue
        if "storage" in diff:
            raise StreamDrift(
                f"stream {name}: storage is {diff['storage'][0]}, contract says "
                f"{diff['storage'][1]}; JetStream cannot change it in place"
            )
        # Merge: the live config with only the managed fields changed.
        merged = dataclasses.replace(info.config, **{f: getattr(wanted, f) for f in _MANAGED})
        try:
            await js.update_stream(merged)
        except APIError as exc:
            raise StreamDrift(
                f"stream {name} drifted {diff} and cannot be updated: {_explain(exc, wanted)}"
            ) from exc
        report.updated[name] = diff
        log.warning("stream updated to the contract", extra={"stream": name, "drift": diff})
    return report


async def ensure_replicated_streams(js: JetStreamContext, replicas: int, within: float) -> None:
    """`ensure_streams` with `replicas` replicas on a cluster that has just formed
    (`update=False`: core owns the settings). Right after its meta leader is elected a cluster
    may not know every peer yet, leave a creation unanswered or answer 503, so this retries
    until it takes them; raises TimeoutError naming the last refusal after `within` seconds."""
    settings = StreamSettings(replicas=replicas)
    deadline = time.monotonic() + within
    while True:
        try:
            await ensure_streams(js, settings, update=False)
        except (BusError, nats.errors.Error, nats.js.errors.Error) as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the NATS cluster did not take R{replicas} streams within {within:.0f}s: {exc}"
                ) from exc
            log.info("the cluster does not take R%d streams yet: %s", replicas, exc)
        else:
            return
        await asyncio.sleep(0.2)  # a retry period, not a wait for a condition


def stream_of(subject: str) -> str | None:
    """The Nexus stream that stores `subject`, None for a subject outside the contract."""
    try:
        return STREAM_OF_FAMILY[subjects.parse_subject(subject).family]
    except (InvalidSubject, KeyError):
        return None


# Seconds a diagnosis waits for each JetStream answer: it runs only after a publish failed.
# A node that can answer does so in milliseconds; one that cannot (no leader reachable) does
# not answer in 2 s either, so waiting longer only delays the error.
DIAGNOSIS_TIMEOUT = 1.0


@dataclass(frozen=True)
class StorageProblem:
    """Why JetStream cannot store in `stream` now. `quorum`: the cluster lacks the nodes to
    elect a leader (for the stream or for the meta group); writes resume once they are back."""

    stream: str
    quorum: bool
    message: str


# What JetStream says without a meta leader (err_code 10008 is "JetStream system temporarily
# unavailable"): most API calls (consumers, stream changes) wait for one.
NO_META_LEADER = (
    "NATS JetStream is unavailable: the cluster has no meta leader (an election, or too few"
    " nodes reachable for a quorum)"
)


async def meta_problem(
    js: JetStreamContext,
    *,
    timeout: float = DIAGNOSIS_TIMEOUT,  # noqa: ASYNC109 - one bounded request, not a scope
) -> StorageProblem | None:
    """Whether JetStream's meta group has a leader (needed to make consumers and change
    streams, not to store in a stream that has its own leader); None if it has."""
    try:
        await asyncio.wait_for(js.account_info(), timeout)
    except ServiceUnavailableError:
        return StorageProblem("", True, NO_META_LEADER)
    except (TimeoutError, nats.errors.Error) as exc:
        # A request routed to a meta leader that just died goes unanswered until a new one
        # is elected: the same outage as the 503, but this side cannot tell it from a slow
        # server, so it is not called a quorum loss.
        return StorageProblem(
            "", False, f"JetStream did not answer ({type(exc).__name__}): no meta leader?"
        )
    return None


async def storage_problem(
    js: JetStreamContext,
    stream: str,
    *,
    timeout: float = DIAGNOSIS_TIMEOUT,  # noqa: ASYNC109 - one bounded request, not a scope
) -> StorageProblem | None:
    """Ask JetStream why `stream` cannot store now; None if it has a leader (or is not
    replicated), i.e. nothing is wrong on the server's side at this moment.

    A replicated stream without a leader lists its replicas: those still current are the
    nodes its group can reach. Without a meta leader the cluster answers 503 (err_code
    10008, "JetStream system temporarily unavailable") to most API calls. A node that has
    just lost its peers answers nothing at all for its first ~7-9 s alone (measured with
    nats-server 2.15 on loopback), exactly as during an election: then the problem is
    named, but not called a quorum loss.
    """
    try:
        info = await asyncio.wait_for(js.stream_info(stream), timeout)
    except NotFoundError:
        return StorageProblem(stream, False, f"no stream {stream} (are the streams ensured?)")
    except ServiceUnavailableError:
        return StorageProblem(stream, True, f"{NO_META_LEADER} ({stream})")
    except (TimeoutError, nats.errors.Error) as exc:
        # A stream without a leader may answer late or not at all: the meta group says more.
        meta = await meta_problem(js, timeout=timeout)
        if meta is not None and meta.quorum:
            return StorageProblem(stream, True, f"{meta.message} ({stream})")
        return StorageProblem(
            stream,
            False,
            f"NATS JetStream did not answer about {stream} within {timeout}s"
            f" ({type(exc).__name__}): no stream or meta leader reachable (an election, or too"
            " few nodes up for a quorum)",
        )
    return _replica_problem(stream, info)


def _replica_problem(stream: str, info: StreamInfo) -> StorageProblem | None:
    """What a stream's cluster info says about its leader (see `storage_problem`)."""
    cluster = info.cluster
    total = info.config.num_replicas or 1
    if cluster is None or total == 1:
        return None
    # The leader lists the others; without a leader every replica is listed. A leader that
    # lost its followers still calls itself leader until it notices, but commits nothing.
    current = (1 if cluster.leader else 0) + sum(1 for p in cluster.replicas or [] if p.current)
    quorum = total // 2 + 1
    if current >= quorum:
        if cluster.leader:
            return None
        return StorageProblem(
            stream,
            False,
            f"{stream} has no leader yet: an election is under way ({current} of {total}"
            " replicas reachable)",
        )
    who = f"leader {cluster.leader} without its followers" if cluster.leader else "no leader"
    return StorageProblem(
        stream,
        True,
        f"NATS JetStream has no quorum for {stream}: {who}, {current} of {total} replicas"
        f" reachable; writes resume once {quorum} are back",
    )
