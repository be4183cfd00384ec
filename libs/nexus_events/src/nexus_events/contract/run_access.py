"""What one run's runner may do on NATS: its consumers' names, its reply prefix, and the
publish/subscribe permissions the scheduler's auth callout gives the run's credential.

The runner and the scheduler both read this module, so the names the runner gives its
JetStream consumers are exactly the names its credential is allowed to create, read and
delete (docs/deploy.md, "The run credential"). Every JetStream consumer of a runner is named
here and filtered on one subject of its own run: nats-py then creates it on
``$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>``, and the server refuses a body whose
filter differs from the subject's, so the permission scopes what the consumer can read.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexus_events.contract import subjects
from nexus_events.contract.runstate import TERMINAL_EVENTS, RunEvent
from nexus_events.contract.streams import (
    CHECKPOINTS_BUCKET,
    INBOX,
    RUNS,
    TRANSCRIPTS,
)

# The run events a runner publishes itself. Not `requested`, `prepared`, `queued`,
# `dispatched`, `resuming`, `cancel_requested`, `timed_out`, `lost` or `approval_refused`:
# those are decided by the scheduler, core or a person's surface.
RUNNER_EVENTS: tuple[RunEvent, ...] = (
    RunEvent.STARTED,
    RunEvent.HEARTBEAT,
    RunEvent.TURN,
    RunEvent.TOOL_CALLED,
    RunEvent.TOOL_RESULT,
    RunEvent.APPROVAL_REQUESTED,
    RunEvent.APPROVAL_DECIDED,
    RunEvent.RESUMED,
    RunEvent.CHECKPOINTED,
    RunEvent.CONDENSED,
    RunEvent.EGRESS,
    RunEvent.MCP_SERVER_UNAVAILABLE,
    RunEvent.DIVERGED,  # a replay's first divergence (docs/lab.md)
    RunEvent.BUDGET_PAUSED,  # a reached budget asks (docs/spend.md)
    RunEvent.BUDGET_RESUMED,
    RunEvent.SLEEPING,  # the attempt ends to sleep (docs/resume.md)
    RunEvent.COMPLETED,
    RunEvent.FAILED,
    RunEvent.CANCELLED,
)
# The run events a runner follows live (control.RunControl): a cancel request, an ending
# someone else published, and a newer attempt.
CONTROL_EVENTS: tuple[RunEvent, ...] = (
    RunEvent.CANCEL_REQUESTED,
    *TERMINAL_EVENTS,
    RunEvent.RESUMING,
)
# The dead-letter source of the runner's bus (`Bus.connect(source="runner")`).
RUNNER_SOURCE = "runner"

# Tool grants that widen what a run may publish.
DELEGATE = "delegate"
REMEMBER = "remember"
GRANTS = (DELEGATE, REMEMBER)


@dataclass(frozen=True)
class RunConsumer:
    """One JetStream consumer a runner may make: on `stream`, named `name`, one `filter`."""

    stream: str
    name: str
    filter: str


def _name(run_id: str, attempt: int, purpose: str) -> str:
    # Attempt in the name: a dead attempt's leftover consumer never clashes with a new one.
    return f"{subjects.validate_token(run_id, 'run id')}_a{attempt}_{purpose}"


def control_consumer(run_id: str, attempt: int, event: RunEvent) -> RunConsumer:
    """The live consumer of the run's `event` (``cancel_requested``, a terminal event, ...)."""
    return RunConsumer(RUNS, _name(run_id, attempt, event), subjects.run_event(run_id, event))


def inbox_consumer(run_id: str, attempt: int) -> RunConsumer:
    """The live consumer of the run's inbox (messages, approval decisions, delegations)."""
    return RunConsumer(INBOX, _name(run_id, attempt, "inbox"), subjects.inbox(run_id))


def history_replay(run_id: str, attempt: int) -> RunConsumer:
    """The bounded replay of the run's own events (resume, start points)."""
    return RunConsumer(RUNS, _name(run_id, attempt, "history"), subjects.run_events_filter(run_id))


def inbox_replay(run_id: str, attempt: int) -> RunConsumer:
    """The bounded replay of the run's inbox (start points of a later attempt)."""
    return RunConsumer(INBOX, _name(run_id, attempt, "inbox_replay"), subjects.inbox(run_id))


def transcript_replay(run_id: str, attempt: int) -> RunConsumer:
    """The bounded replay of the run's transcript (resume)."""
    return RunConsumer(
        TRANSCRIPTS, _name(run_id, attempt, "transcript"), subjects.run_transcript(run_id)
    )


# The checkpoints' stream: a JetStream object store's, written without its meta records
# (docs/resume.md): each checkpoint's chunks on a subject of its run's own.
CHECKPOINTS_STREAM = f"OBJ_{CHECKPOINTS_BUCKET}"


def checkpoint_chunks(run_id: str, attempt: int, count: int) -> str:
    """``$O.nexus_checkpoints.C.<run_id>.<attempt>.<count>``: the chunks of one checkpoint."""
    run = subjects.validate_token(run_id, "run id")
    return f"$O.{CHECKPOINTS_BUCKET}.C.{run}.{attempt}.{count}"


def checkpoint_replay(run_id: str, attempt: int) -> RunConsumer:
    """The bounded replay of one of the run's checkpoints (any attempt's: a resume reads the
    previous attempt's); its filter names the run, the replay's names the checkpoint."""
    run = subjects.validate_token(run_id, "run id")
    return RunConsumer(
        CHECKPOINTS_STREAM,
        _name(run_id, attempt, "checkpoint"),
        f"$O.{CHECKPOINTS_BUCKET}.C.{run}.>",
    )


def source_transcript_replay(run_id: str, attempt: int, source_run_id: str) -> RunConsumer:
    """A lab run's bounded replay of its source run's transcript (docs/lab.md): named after
    the lab run, filtered on the source's transcript subject and nothing else."""
    return RunConsumer(
        TRANSCRIPTS,
        _name(run_id, attempt, "source_transcript"),
        subjects.run_transcript(source_run_id),
    )


def source_history_replay(run_id: str, attempt: int, source_run_id: str) -> RunConsumer:
    """A lab run's bounded replay of its source run's events (tool ledger, checkpoints)."""
    return RunConsumer(
        RUNS, _name(run_id, attempt, "source_history"), subjects.run_events_filter(source_run_id)
    )


def source_checkpoint_replay(run_id: str, attempt: int, source_run_id: str) -> RunConsumer:
    """A fork's bounded replay of one of its source run's checkpoints."""
    source = subjects.validate_token(source_run_id, "source run id")
    return RunConsumer(
        CHECKPOINTS_STREAM,
        _name(run_id, attempt, "source_checkpoint"),
        f"$O.{CHECKPOINTS_BUCKET}.C.{source}.>",
    )


def run_consumers(
    run_id: str, attempt: int, source_run_id: str | None = None
) -> tuple[RunConsumer, ...]:
    """Every consumer attempt `attempt` of `run_id` makes; a lab run (`source_run_id`) also
    reads its source run's transcript, events and checkpoints, read-only."""
    live = [control_consumer(run_id, attempt, e) for e in CONTROL_EVENTS]
    lab = (
        (
            source_transcript_replay(run_id, attempt, source_run_id),
            source_history_replay(run_id, attempt, source_run_id),
            source_checkpoint_replay(run_id, attempt, source_run_id),
        )
        if source_run_id is not None
        else ()
    )
    return (
        *live,
        inbox_consumer(run_id, attempt),
        history_replay(run_id, attempt),
        inbox_replay(run_id, attempt),
        transcript_replay(run_id, attempt),
        checkpoint_replay(run_id, attempt),
        *lab,
    )


def inbox_prefix(run_id: str) -> str:
    """The reply prefix of a runner's connection (nats-py ``inbox_prefix``): its replies and
    consumer deliveries come on ``_INBOX_<run_id>.>``, which no other run may read."""
    return f"_INBOX_{subjects.validate_token(run_id, 'run id')}"


@dataclass(frozen=True)
class RunPermissions:
    """Publish and subscribe allow lists of one run's credential (or a warm pod's slot)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    # nats-server's ``allow_responses``: one reply to each request received, on its reply
    # subject, whatever the publish list says (a warm pod's answer to its hand-off).
    allow_responses: bool = False


def _consumer_api(consumer: RunConsumer) -> list[str]:
    s, n = consumer.stream, consumer.name
    return [
        f"$JS.API.CONSUMER.CREATE.{s}.{n}.{consumer.filter}",
        f"$JS.API.CONSUMER.INFO.{s}.{n}",
        f"$JS.API.CONSUMER.DELETE.{s}.{n}",
        f"$JS.API.CONSUMER.MSG.NEXT.{s}.{n}",
        f"$JS.ACK.{s}.{n}.>",
    ]


def _checkpoint_api(run_id: str) -> list[str]:
    # Its own checkpoints' chunks only (nexus_runner.checkpoint writes no meta records); the
    # stream's info, and its creation by the stack's first checkpoint. No purge or read by
    # sequence: those take any subject in their body.
    return [
        f"$O.{CHECKPOINTS_BUCKET}.C.{subjects.validate_token(run_id, 'run id')}.>",
        f"$JS.API.STREAM.INFO.{CHECKPOINTS_STREAM}",
        f"$JS.API.STREAM.CREATE.{CHECKPOINTS_STREAM}",
    ]


def run_permissions(
    run_id: str, attempt: int, grants: frozenset[str], source_run_id: str | None = None
) -> RunPermissions:
    """What attempt `attempt` of `run_id` may publish and subscribe to, given its `grants`
    (a subset of `GRANTS`: the tools that reach other services) and, for a lab run, the run
    it replays or forks (`source_run_id`: read its transcript, events and checkpoints; never
    write anything of it)."""
    unknown = grants - set(GRANTS)
    if unknown:
        raise ValueError(f"unknown grants {sorted(unknown)}; known: {list(GRANTS)}")
    pub = [subjects.run_event(run_id, e) for e in RUNNER_EVENTS]
    pub += [
        subjects.run_log(run_id),
        subjects.run_transcript(run_id),
        subjects.dead_letter(RUNNER_SOURCE),
        # Where its control channel and replays start (a stream's last sequence).
        f"$JS.API.STREAM.INFO.{RUNS}",
        f"$JS.API.STREAM.INFO.{INBOX}",
    ]
    if DELEGATE in grants:
        pub.append(subjects.family_filter(subjects.Family.ROUTE))
    if REMEMBER in grants:
        pub.append(subjects.MEMORY_RECORD)
    # The reservation before each model call, for its own run only (docs/spend.md).
    pub.append(subjects.spend_reserve(run_id))
    for consumer in run_consumers(run_id, attempt, source_run_id):
        pub += _consumer_api(consumer)
    pub += _checkpoint_api(run_id)
    return RunPermissions(
        publish=tuple(dict.fromkeys(pub)), subscribe=(f"{inbox_prefix(run_id)}.>",)
    )


def warm_slot_permissions(slot: str) -> RunPermissions:
    """What a warm runner pod's slot credential may do (docs/warm-starts.md, Kubernetes):
    receive the hand-offs of its own slot and answer each once; nothing else. No pod can read
    another's hand-off (which carries that run's own credential)."""
    return RunPermissions(publish=(), subscribe=(subjects.runner_warm(slot),), allow_responses=True)


__all__ = [
    "CHECKPOINTS_STREAM",
    "CONTROL_EVENTS",
    "DELEGATE",
    "GRANTS",
    "REMEMBER",
    "RUNNER_EVENTS",
    "RunConsumer",
    "RunPermissions",
    "checkpoint_chunks",
    "checkpoint_replay",
    "control_consumer",
    "history_replay",
    "inbox_consumer",
    "inbox_prefix",
    "inbox_replay",
    "run_consumers",
    "run_permissions",
    "source_checkpoint_replay",
    "source_history_replay",
    "source_transcript_replay",
    "transcript_replay",
    "warm_slot_permissions",
]
