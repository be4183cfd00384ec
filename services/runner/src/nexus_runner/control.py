"""The runner's control channel: inbox messages, approval decisions and cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import nats.errors
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nexus_events import subjects
from nexus_events.bus import Bus, decode_msg
from nexus_events.errors import DecodeError
from nexus_events.events.inbox import ApprovalDecision, InboxMessage
from nexus_events.events.runs import CancelRequested

log = logging.getLogger(__name__)


class RunControl:
    """Follows ``agent.inbox.v1.<run_id>`` and the run's ``cancel_requested`` from the start
    of the stream (a cancel sent before the runner came up still counts)."""

    def __init__(self, bus: Bus, run_id: str) -> None:
        self.bus = bus
        self.run_id = run_id
        self.messages: list[InboxMessage] = []
        self.cancel: CancelRequested | None = None
        self.cancelled = asyncio.Event()
        self._decisions: dict[str, ApprovalDecision] = {}
        self._waiters: dict[str, asyncio.Future[ApprovalDecision]] = {}
        self._seen_messages: set[str] = set()
        self._subs: list[Any] = []

    async def start(self) -> None:
        for subject in (
            subjects.inbox(self.run_id),
            subjects.run_event(self.run_id, "cancel_requested"),
        ):
            sub = await self.bus.js.subscribe(
                subject, cb=self._on_msg, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
            )
            self._subs.append(sub)

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        self._subs.clear()

    async def _on_msg(self, msg: Msg) -> None:
        try:
            event = decode_msg(msg).event
        except DecodeError as exc:
            log.warning("ignoring undecodable control message on %s: %s", msg.subject, exc)
            return
        if isinstance(event, CancelRequested):
            if self.cancel is None:
                self.cancel = event
                self.cancelled.set()
        elif isinstance(event, ApprovalDecision):
            # The first decision wins; later ones for the same approval are ignored.
            if event.approval_id not in self._decisions:
                self._decisions[event.approval_id] = event
                waiter = self._waiters.get(event.approval_id)
                if waiter is not None and not waiter.done():
                    waiter.set_result(event)
        elif isinstance(event, InboxMessage):
            key = event.message_id or f"seq:{msg.metadata.sequence.stream}"
            if key not in self._seen_messages:
                self._seen_messages.add(key)
                self.messages.append(event)

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
