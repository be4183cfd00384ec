"""The runner's control channel: inbox messages, approval decisions, cancellation, the run's
terminal event when someone else (the scheduler: lost, timed_out, ...) published it, and a
newer attempt of the run (``resuming``), which supersedes this runner."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from nats.aio.msg import Msg
from nexus_events.contract import run_access
from nexus_events.contract.codec import Envelope
from nexus_events.contract.runstate import RunStatus
from nexus_events.contract.streams import INBOX, RUNS
from nexus_events.errors import DecodeError
from nexus_events.events.inbox import ApprovalDecision, InboxMessage
from nexus_events.events.runs import (
    CancelRequested,
    RunDispatched,
    RunResuming,
    TerminalEvent,
)
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.transport.bus import Bus, decode_msg

from nexus_runner.errors import RunStopped
from nexus_runner.followed import FollowedSubject

log = logging.getLogger(__name__)

# How often the control channel checks that the server still has its consumers (a restarted
# server has lost them: they are made again from where they left off).
_CHECK_INTERVAL = 2.0

# The runner publishes its own terminal event only after it stopped following these, so one
# seen while it runs was published by someone else and ends the run for good.


@dataclass(frozen=True)
class StartPoints:
    """Stream sequences where this attempt's control messages begin (1 = from the start)."""

    inbox_seq: int = 1
    runs_seq: int = 1


async def _last_seq(bus: Bus, stream: str) -> int:
    return int((await bus.js.stream_info(stream)).state.last_seq or 0)


async def start_points(bus: Bus, run_id: str, attempt: int) -> StartPoints:
    """Where attempt `attempt` of `run_id` starts reading its inbox and cancel requests.

    Attempt 1 reads from the start of the streams: a message or a cancel sent before the
    runner came up counts. A later attempt reads what no earlier attempt could have seen:
    what was stored after the run's last terminal event before this attempt's ``dispatched``
    (so a message sent while the run waited for its retry is delivered), else after this
    attempt's ``dispatched``, else (no scheduler events, e.g. a config file) after the
    streams' current ends. Inbox messages are matched by the server's store time.
    """
    if attempt <= 1:
        return StartPoints()
    inbox_end = await _last_seq(bus, INBOX)
    runs_end = await _last_seq(bus, RUNS)
    terminal: Envelope | None = None
    dispatched: Envelope | None = None
    history = run_access.history_replay(run_id, attempt).name
    async for decoded in bus.replay(RUNS, run_id=run_id, name=history):
        event = decoded.event
        if isinstance(event, RunDispatched) and event.attempt == attempt:
            dispatched = decoded.envelope
        elif isinstance(event, TerminalEvent) and dispatched is None:
            terminal = decoded.envelope
    cutoff = terminal or dispatched
    if cutoff is None or cutoff.stream_seq is None or cutoff.timestamp_ns is None:
        return StartPoints(inbox_seq=inbox_end + 1, runs_seq=runs_end + 1)
    inbox_seq = inbox_end + 1
    # One run's inbox is short: read it to the end (the replay cleans up its consumer).
    replay = run_access.inbox_replay(run_id, attempt)
    async for decoded in bus.replay(INBOX, filter_subject=replay.filter, name=replay.name):
        stored = decoded.envelope
        later = stored.timestamp_ns is not None and stored.timestamp_ns > cutoff.timestamp_ns
        if later and stored.stream_seq is not None:
            inbox_seq = min(inbox_seq, stored.stream_seq)
    return StartPoints(inbox_seq=inbox_seq, runs_seq=cutoff.stream_seq + 1)


async def resume_points(bus: Bus) -> tuple[StartPoints, int]:
    """Where a resumed attempt reads: from the start of the run's inbox (what its transcript
    injected is skipped, see `RunControl`) and of its cancel requests (a cancel the dead
    attempt never acted on still stops the run; no terminal event precedes a resume); and
    the NEXUS_INBOX sequence from which a delegation's reply is this attempt's."""
    return StartPoints(), await _last_seq(bus, INBOX) + 1


class RunControl:
    """Follows ``agent.inbox.v1.<run_id>`` and the run's ``cancel_requested`` from the given
    start points (by default the start of the streams: a cancel sent before the runner came
    up still counts; see `start_points` for later attempts).

    A resumed attempt reads its inbox from the start (`resume_points`) and skips the messages
    its transcript already injected (`skip_inbox`, NEXUS_INBOX sequences), so every message
    is given to the model once, also one sent while the run had no runner. Replies to
    delegations stored before it started (`replies_before`) answered calls of a dead attempt:
    the transcript holds what came of those calls, so they are not new messages.
    """

    def __init__(
        self,
        bus: Bus,
        run_id: str,
        attempt: int = 1,
        *,
        skip_inbox: frozenset[int] = frozenset(),
        replies_before: int = 0,
    ) -> None:
        self.bus = bus
        self.run_id = run_id
        self.attempt = attempt
        self.skip_inbox = skip_inbox
        self.replies_before = replies_before
        # A `resuming` for a later attempt: the scheduler gave up on this runner; it stops at
        # once and does nothing more in the run's name (ended_elsewhere is set too).
        self.superseded: RunResuming | None = None
        self.messages: list[InboxMessage] = []  # not yet injected into a turn
        self.received: list[InboxMessage] = []  # every message this attempt was given
        self.message_arrived = asyncio.Event()
        self.cancel: CancelRequested | None = None
        self.cancelled = asyncio.Event()
        self.ended: TerminalEvent | None = None
        self.ended_elsewhere = asyncio.Event()
        self._decisions: dict[str, ApprovalDecision] = {}
        self._waiters: dict[str, asyncio.Future[ApprovalDecision]] = {}
        self._seen_messages: set[str] = set()
        # NEXUS_INBOX sequence of each message received (by identity), for the transcript.
        self._seqs: dict[int, int] = {}
        # Delegations waited for (the `delegate` tool): the child's result by correlation id.
        self._correlated: dict[str, asyncio.Future[InboxMessage]] = {}
        self._followed: list[FollowedSubject] = []
        # A poll: the server says nothing when it loses a consumer. A check in hand is cut
        # on stop (the consumers are deleted next).
        self._checks = PeriodicTask(
            self._ensure_followed,
            _CHECK_INTERVAL,
            name=f"control:{self.run_id} check",
            first="after_interval",
            stop_grace=0,
            logger=log,
        )

    async def start(self, points: StartPoints | None = None) -> None:
        points = points or StartPoints()
        followed = [(run_access.inbox_consumer(self.run_id, self.attempt), points.inbox_seq)]
        followed += [
            (run_access.control_consumer(self.run_id, self.attempt, event), points.runs_seq)
            for event in run_access.CONTROL_EVENTS
        ]
        for consumer, seq in followed:
            subject = FollowedSubject(self.bus, consumer, seq, self._on_msg)
            await subject.start()
            self._followed.append(subject)
        self._checks.start()

    async def _ensure_followed(self) -> None:
        for subject in self._followed:
            await subject.ensure()

    async def _dead_letter(self, msg: Msg, exc: DecodeError) -> None:
        # Not dropped: a person who typed a bad `nats pub` finds it in `nexus dlq ls` with the
        # reason. The run goes on whatever happens here (this is a subscription callback).
        try:
            await self.bus.dead_letter(
                msg, reason=exc.reason, error=str(exc), consumer=f"runner:{self.run_id}"
            )
        except Exception:  # the control channel must outlive a DLQ that is away
            log.exception("could not dead-letter the control message on %s", msg.subject)

    async def stop(self) -> None:
        await self._checks.stop()
        for subject in self._followed:
            await subject.stop()
        self._followed.clear()

    async def _on_msg(self, msg: Msg) -> None:
        try:
            event = decode_msg(msg).event
        except DecodeError as exc:
            await self._dead_letter(msg, exc)
            return
        if isinstance(event, CancelRequested):
            if self.cancel is None:
                self.cancel = event
                self.cancelled.set()
        elif isinstance(event, TerminalEvent):
            if self.ended is None:
                self.ended = event
                self.ended_elsewhere.set()
                log.warning(
                    "run %s was ended by someone else (%s: %s); stopping",
                    self.run_id,
                    event.event_name,
                    event.reason or event.message,
                )
        elif isinstance(event, RunResuming):
            self._on_resuming(event)
        elif isinstance(event, ApprovalDecision):
            # The first decision wins; later ones for the same approval are ignored.
            if event.approval_id not in self._decisions:
                self._decisions[event.approval_id] = event
                waiter = self._waiters.get(event.approval_id)
                if waiter is not None and not waiter.done():
                    waiter.set_result(event)
        elif isinstance(event, InboxMessage):
            self._on_inbox(event, msg.metadata.sequence.stream)

    def _on_resuming(self, event: RunResuming) -> None:
        if event.attempt > self.attempt and self.superseded is None:
            self.superseded = event
            self.ended_elsewhere.set()
            log.warning(
                "run %s: attempt %d started (%s); this runner (attempt %d) stops",
                self.run_id,
                event.attempt,
                event.reason,
                self.attempt,
            )

    def _on_inbox(self, event: InboxMessage, seq: int) -> None:
        if seq in self.skip_inbox:
            return  # the transcript shows an earlier attempt gave it to the model
        if event.correlation_id and seq < self.replies_before:
            return
        key = event.message_id or f"seq:{seq}"
        if key in self._seen_messages:
            return
        self._seen_messages.add(key)
        pending = self._correlated.get(event.correlation_id or "")
        if pending is not None and not pending.done():
            pending.set_result(event)  # the tool call's output, not a new message
            return
        self._seqs[id(event)] = seq
        self.messages.append(event)
        self.received.append(event)
        self.message_arrived.set()

    def ensure_not_ended(self) -> None:
        """Raise `RunStopped` when the run is already terminal: checked before every side
        effect outside the workspace (commit, push, pull request), since a terminal state is
        final and nothing may be done in the run's name after it."""
        if self.ended is not None:
            raise RunStopped(
                RunStatus.FAILED,
                self.ended.reason or "ended",
                f"the run was already ended {self.ended.event_name}",
            )
        if self.superseded is not None:
            raise RunStopped(
                RunStatus.FAILED,
                self.superseded.reason,
                f"superseded by attempt {self.superseded.attempt} of the run",
            )

    def stop_if_cancelled(self) -> None:
        """Raise the run's cancelled `RunStopped` once a cancel request came."""
        cancel = self.cancel
        if cancel is not None:
            raise RunStopped(
                RunStatus.CANCELLED, cancel.reason, "cancel requested", {"by": cancel.requested_by}
            )

    def inbox_seq(self, message: InboxMessage) -> int | None:
        """The NEXUS_INBOX sequence `message` was stored at (None: not from the inbox)."""
        return self._seqs.get(id(message))

    def take_messages(self) -> list[InboxMessage]:
        taken, self.messages = self.messages, []
        return taken

    async def wait_decision(self, approval_id: str, timeout: float) -> ApprovalDecision | None:
        """The first decision on `approval_id`, or None when `timeout` passes (expired)."""
        if approval_id in self._decisions:
            return self._decisions[approval_id]
        waiter: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        self._waiters[approval_id] = waiter
        try:
            return await asyncio.wait_for(waiter, timeout=timeout)
        except TimeoutError:
            return None
        finally:
            self._waiters.pop(approval_id, None)

    def expect(self, correlation_id: str) -> asyncio.Future[InboxMessage]:
        """A future for the inbox message carrying `correlation_id` (register it before the
        request goes out, so a fast answer is not taken for an ordinary message)."""
        waiter: asyncio.Future[InboxMessage] = asyncio.get_running_loop().create_future()
        self._correlated[correlation_id] = waiter
        return waiter

    def forget(self, correlation_id: str) -> None:
        self._correlated.pop(correlation_id, None)
