"""One ordered consumer per followed family, from the moment the console starts, fanned out
to every open page whose filter wants the event.

Pages never poll the queries: a page renders what the queries answer, then subscribes here
and is sent what happens after. An ordered consumer is JetStream's ack-less, flow-controlled
reader that re-creates itself past a gap, so a page sees every event in stream order. A page
that falls `queue_size` events behind (a stalled browser) is dropped and told to reload,
never allowed to hold the console's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import DeliverPolicy
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunStatus, next_status
from nexus_events.contract.subjects import Family
from nexus_events.errors import DecodeError, InvalidSubject
from nexus_events.transport.bus import Bus
from nexus_events.transport.consume import decode_msg

log = logging.getLogger(__name__)

# What the console shows live.
FOLLOWED: tuple[Family, ...] = (
    Family.RUN,
    Family.LOG,
    Family.FLOW,
    Family.TASK,
    Family.SCHEDULE,
    Family.CATALOG,
    Family.DLQ,
    Family.EVAL,
)


@dataclass(frozen=True, slots=True)
class LiveEvent:
    """One stored message as pages see it; `poison` holds why it did not decode (then `body`
    is its raw text, cut short)."""

    family: Family
    subject: str
    stream: str
    seq: int
    name: str | None
    ids: dict[str, str]
    body: dict[str, Any]
    time_ns: int | None = None
    poison: str | None = None
    # A run event that moved its run's status: the status it moved to (`next_status`).
    status: RunStatus | None = None

    @property
    def run_id(self) -> str | None:
        return self.ids.get("run_id")

    @property
    def flow_run_id(self) -> str | None:
        return self.ids.get("flow_run_id")

    @property
    def eval_run_id(self) -> str | None:
        return self.ids.get("eval_run_id")


def live_event(msg: Msg) -> LiveEvent:
    meta = msg.metadata
    try:
        decoded = decode_msg(msg)
    except DecodeError as exc:
        try:
            address = subjects.parse_subject(msg.subject)
            family, ids, name = address.family, dict(address.ids), address.event
        except InvalidSubject:
            family, ids, name = Family.DLQ, {}, None
        raw = (msg.data or b"")[:2000].decode("utf-8", errors="replace")
        return LiveEvent(
            family, msg.subject, meta.stream, meta.sequence.stream, name, ids,
            {"raw": raw}, meta.timestamp_ns if hasattr(meta, "timestamp_ns") else None,
            poison=f"{exc.reason}: {exc}",
        )  # fmt: skip
    address = decoded.address
    return LiveEvent(
        address.family,
        msg.subject,
        meta.stream,
        meta.sequence.stream,
        address.event or type(decoded.event).event_name,
        dict(address.ids),
        decoded.event.model_dump(mode="json", exclude_none=True),
        decoded.envelope.timestamp_ns,
    )


Wants = Callable[[LiveEvent], bool]
# Runs whose status the hub tracks at most (the least recently moved are forgotten).
TRACKED_RUNS = 50_000
# Events per stream kept for pages whose feed opens after they were rendered.
RECENT = 2000


@dataclass(eq=False)
class Watcher:
    """One open page's feed: the events its filter wants, until it is closed or falls
    behind."""

    wants: Wants
    queue: asyncio.Queue[LiveEvent | None] = field(default_factory=lambda: asyncio.Queue(1000))
    overflowed: bool = False

    def offer(self, event: LiveEvent) -> None:
        if self.overflowed or not self.wants(event):
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed = True
            with contextlib.suppress(asyncio.QueueEmpty):
                self.queue.get_nowait()
            self.queue.put_nowait(None)  # the page is told to reload

    def close(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(None)


class LiveHub:
    """Follows `families` from now on and hands each event to the watchers that want it."""

    def __init__(self, bus: Bus, queue_size: int = 1000, families: tuple[Family, ...] = FOLLOWED):
        self.bus = bus
        self.queue_size = queue_size
        self.families = families
        self._subs: list[Subscription] = []
        self._watchers: set[Watcher] = set()
        self.delivered = 0
        self.last_seq: dict[str, int] = {}
        # The latest events per stream: a page rendered from a query before its live feed
        # opened is sent what it missed in between (`watch(since=...)`).
        self._recent: dict[str, deque[LiveEvent]] = {}
        # The status of each run seen since the console started (bounded): a live page is sent
        # a run's status only when an event moves it, by the contract's own rule.
        self._statuses: OrderedDict[str, RunStatus] = OrderedDict()

    async def start(self) -> None:
        for family in self.families:
            sub = await self.bus.js.subscribe(
                subjects.family_filter(family),
                cb=self._on_msg,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
            )
            self._subs.append(sub)

    async def stop(self) -> None:
        for watcher in list(self._watchers):
            watcher.close()
        self._watchers.clear()
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()

    @property
    def watchers(self) -> int:
        return len(self._watchers)

    async def _on_msg(self, msg: Msg) -> None:
        try:
            event = live_event(msg)
        except Exception:
            log.exception("cannot show %s live", msg.subject)
            return
        if event.family is Family.RUN and event.run_id and event.name and not event.poison:
            event = self._with_status(event.run_id, event)
        self.delivered += 1
        self.last_seq[event.stream] = event.seq
        self._recent.setdefault(event.stream, deque(maxlen=RECENT)).append(event)
        for watcher in list(self._watchers):
            watcher.offer(event)

    def _with_status(self, run_id: str, event: LiveEvent) -> LiveEvent:
        moved = next_status(self._statuses.get(run_id), event.name or "")
        if moved is None:
            return event
        self._statuses[run_id] = moved
        self._statuses.move_to_end(run_id)
        if len(self._statuses) > TRACKED_RUNS:
            self._statuses.popitem(last=False)
        return dataclasses.replace(event, status=moved)

    def position(self) -> dict[str, int]:
        """Where each stream is now: a page renders it so its live feed starts there."""
        return dict(self.last_seq)

    @contextlib.contextmanager
    def watch(self, wants: Wants, since: Mapping[str, int] | None = None) -> Iterator[Watcher]:
        """A feed of the events `wants` takes; with `since` (stream -> seq), first those
        after it that the hub still holds."""
        watcher = Watcher(wants, asyncio.Queue(self.queue_size))
        if since is not None:
            missed = [
                event
                for stream, recent in self._recent.items()
                for event in recent
                if event.seq > since.get(stream, 0)
            ]
            for event in sorted(missed, key=lambda e: e.time_ns or 0):
                watcher.offer(event)
        self._watchers.add(watcher)
        try:
            yield watcher
        finally:
            self._watchers.discard(watcher)
