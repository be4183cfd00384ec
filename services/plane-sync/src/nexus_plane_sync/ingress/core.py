"""What every part of the Plane ingress shares: its state, publishing a command (read-your-writes
bookkeeping), counting what a delivery came to, and the verdict on an unusable webhook."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from nats.js.api import PubAck
from nexus_events.contract.approver_policy import DEFAULT_PRINCIPALS, Teams
from nexus_events.events import Column, PlaneWebhookReceived
from nexus_events.events.base import Event
from nexus_events.transport.bus import Bus

from nexus_plane_sync import render
from nexus_plane_sync.errors import PlaneUnavailable
from nexus_plane_sync.metrics import IGNORED_PREFIX, PlaneSyncMetrics
from nexus_plane_sync.plane_api import PlaneApi
from nexus_plane_sync.store import PlaneStore

# One logger for the whole ingress (operators and tests follow "nexus_plane_sync.ingress").
# Who asks, in the message id of the runs and flow runs a webhook requests.
SOURCE = "plane"
log = logging.getLogger("nexus_plane_sync.ingress")


class Unusable(ValueError):  # noqa: N818 - a verdict on the webhook
    """The webhook cannot be acted on (dead-lettered with `reason`)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class IngressCore:
    """The ingress's state and the steps every handler uses (publish, count, ignore)."""

    def __init__(
        self,
        bus: Bus,
        store: PlaneStore,
        api: PlaneApi,
        metrics: PlaneSyncMetrics,
        *,
        trigger_prefix: str,
        flow_prefix: str = "flow:",
        bot_user_id: str | None,
        assign_agent: str | None = None,
        state_map: dict[str, str] | None = None,
        mirrored: Callable[[dict[str, int]], Awaitable[None]] | None = None,
        default_approvers: tuple[str, ...] = DEFAULT_PRINCIPALS,
        teams: Teams | None = None,
    ) -> None:
        self.bus = bus
        self.store = store
        self.api = api
        self.metrics = metrics
        self.prefix = trigger_prefix
        self.flow_prefix = flow_prefix
        self.bot_user_id = bot_user_id
        self.assign_agent = assign_agent
        self.default_approvers = default_approvers
        self.teams = dict(teams or {})  # NEXUS_TEAMS: who team:<name> is
        # Read-your-writes: the highest sequence this ingress published to each stream, and
        # how to wait until the mirror (whose tables say which runs are active) applied it.
        # Without it, a label removed right after it requested a run finds no run to cancel.
        self.published: dict[str, int] = {}
        self._counts: Counter[str] = Counter()  # the outcome of the delivery in hand
        self.mirrored = mirrored
        # Plane state name -> the first board column mapped to it (Column order).
        self.columns: dict[str, Column] = {}
        for column in Column:
            name = (state_map or {}).get(column.value)
            if name is not None:
                self.columns.setdefault(name.casefold(), column)

    async def bot(self) -> str | None:
        """The Plane user of our API key (asked once; None while Plane cannot say)."""
        if self.bot_user_id is None:
            try:
                me = await self.api.me()
            except PlaneUnavailable:
                return None
            self.bot_user_id = str(me.get("id")) if me.get("id") else None
        return self.bot_user_id

    def _count(self, outcome: str) -> None:
        self._counts[outcome] += 1

    def _ignore(self, w: PlaneWebhookReceived, reason: str, *, unknown: bool = False) -> None:
        """The delivery makes no Nexus command: count why; an unknown action, event or
        shape is a warning (Plane sent something this code was not written for)."""
        self._count(IGNORED_PREFIX + reason)
        level = logging.WARNING if unknown else logging.DEBUG
        log.log(
            level, "webhook %s (%s %s, field %s) ignored: %s",
            w.delivery_id, w.event, w.action, w.activity.get("field"), reason,
        )  # fmt: skip

    async def _publish(self, subject: str, event: Event, *, msg_id: str) -> None:
        self._stored(await self.bus.publish(subject, event, msg_id=msg_id))

    def _stored(self, ack: PubAck) -> None:
        if ack.seq > self.published.get(ack.stream, 0):
            self.published[ack.stream] = ack.seq


def _description(data: dict[str, Any]) -> str:
    if data.get("description_stripped"):
        return str(data["description_stripped"])
    return render.plain_text(str(data.get("description_html") or ""))


def _instructions(data: dict[str, Any]) -> str:
    name = str(data.get("name") or "").strip()
    body = _description(data)
    return f"{name}\n\n{body}".strip()
