"""Plane -> Nexus: what each filed webhook asks for, published as Nexus commands.

- A work item that gains a trigger label (``agent:<agent id>``, on create or on a label
  change) requests a run of that agent on the item's task (a task filed from the item first,
  ``external_source`` "plane"); losing the label cancels that agent's active runs there.
  A flow label (``flow:<flow id>``) does the same with a flow run of that flow.
- ``/approve <id>`` / ``/deny <id>`` on a work item whose task has a flow run with a gate
  of that approval id answer the gate (`answers`, the gate's approvers as policy).
- A comment on a work item with an active run: ``/approve <id> [note]`` and
  ``/deny <id> [note]`` answer an approval if no other surface did first (`answers`),
  ``/stop`` cancels, anything else goes to the run's inbox as a message from that person.
- A native agent run's ``stop`` signal cancels the Nexus run behind it.
Echoes (changes made with plane-sync's own API key, comments it wrote) are recognised by the
actor and by ``external_source`` and ignored, except that label state is still recorded.
Every command's ``Nats-Msg-Id`` derives from the delivery or the Plane object, so a redelivered
webhook publishes nothing twice. A webhook that cannot be understood is dead-lettered.

The payloads are Plane's (makeplane/plane ``apps/api/plane/bgtasks/webhook_task.py``): action
``created`` / ``updated`` / ``deleted`` (Plane before v0.20 said ``create`` / ``update`` /
``delete``: still read); an issue's ``data`` is the work item after the change with ``state``
an object ``{id, name, color, group}`` and labels expanded; an ``updated`` delivery names one
changed field in ``activity.field`` as the caller sent it (the web app: ``name``,
``description_html``, ``state_id``, ``label_ids``, ``assignee_ids``; the API: ``state``,
``labels``, ...). Every delivery is counted by what it came to (`PlaneSyncMetrics`, persisted
by `PlaneStore.count_webhooks`); one that made no command is counted as ``ignored:<reason>``
and logged at debug, or at warning when its action, event or shape is unknown.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import PLANE
from nexus_events.events import PlaneWebhookReceived
from nexus_events.events.base import Event
from nexus_events.transport.bus import ConsumerSpec
from nexus_events.transport.fast import Reject, Retry

from nexus_plane_sync.errors import PlaneUnavailable
from nexus_plane_sync.ingress.comments import CommentCommands
from nexus_plane_sync.ingress.core import Unusable, log
from nexus_plane_sync.ingress.work_items import WorkItemTriage
from nexus_plane_sync.plane_api import EXTERNAL_SOURCE

# Plane's verbs, and the HTTP-method words Plane before v0.20 sent (harmless to keep).
_ACTIONS = {
    "created": "create", "updated": "update", "deleted": "delete",
    "create": "create", "update": "update", "delete": "delete",
}  # fmt: skip
# Events Plane sends that plane-sync has no use for (webhook_task.py's SERIALIZER_MAPPER).
_NOT_FOLLOWED = frozenset(
    ("project", "cycle", "module", "cycle_issue", "module_issue", "user", "intake_issue")
)


def ingress_spec(durable: str, fetch_timeout: float) -> ConsumerSpec:
    return ConsumerSpec(
        stream=PLANE,
        durable=durable,
        filter_subjects=(subjects.plane_events_filter(event="webhook_received"),),
        batch=50,
        max_deliver=10,
        backoff=(1.0, 5.0, 15.0, 30.0, 60.0),
        fetch_timeout=fetch_timeout,
    )


def _actor(activity: dict[str, Any]) -> tuple[str | None, str | None]:
    actor = activity.get("actor")
    if isinstance(actor, dict):
        aid = actor.get("id")
        name = actor.get("display_name") or actor.get("email") or aid
        return (str(aid) if aid else None, str(name) if name else None)
    if isinstance(actor, str):
        return actor, actor
    return None, None


class PlaneIngress(WorkItemTriage, CommentCommands):
    """Plane -> Nexus: one filed webhook at a time, to the handler of its event."""

    async def on_webhook(self, event: Event) -> None:
        """FastStream handler of the webhook durable (`nexus_events.transport.fast`): one filed
        webhook at a time, in stream order (subscribed with ``ordered=True``)."""
        if not isinstance(event, PlaneWebhookReceived):
            raise Reject("unexpected_event", f"{type(event).__name__} on the webhook consumer")
        if self.mirrored is not None and self.published:
            await self.mirrored(dict(self.published))
        # What this delivery came to; one delivery at a time (ordered), so one tally.
        self._counts = Counter[str]()
        try:
            await self.handle(event)
        except Unusable as exc:
            log.warning(
                "webhook %s (%s %s) dead-lettered: %s",
                event.delivery_id, event.event, event.action, exc,
            )  # fmt: skip
            await self._tally(event, Counter(unusable=1))
            raise Reject(exc.reason, str(exc)) from None
        except PlaneUnavailable as exc:
            log.warning("webhook %s waits for Plane: %s", event.delivery_id, exc)
            raise Retry(5.0, f"Plane unavailable: {exc}") from None
        if not self._counts:  # every path counts; this only guards a path that forgot
            self._ignore(event, "no_change")
        await self._tally(event, self._counts)

    async def _tally(self, w: PlaneWebhookReceived, counts: Counter[str]) -> None:
        """Count the delivery's outcome once (in the database, then in this process)."""
        if await self.store.count_webhooks(dict(counts), w.delivery_id):
            for name, n in counts.items():
                self.metrics.webhook(name, n)

    async def handle(self, w: PlaneWebhookReceived) -> None:
        if w.event not in ("issue", "issue_comment") and not w.event.startswith("agent_run"):
            known = w.event in _NOT_FOLLOWED
            self._ignore(w, "event_not_followed" if known else "unknown_event", unknown=not known)
            return
        actor_id, actor_name = _actor(w.activity)
        echo = actor_id is not None and actor_id == await self.bot()
        if w.event.startswith("agent_run"):  # commercial editions; action not checked
            if echo:
                self._ignore(w, "echo")
            else:
                await self._agent_run_signal(w, actor_name)
            return
        action = _ACTIONS.get(w.action)
        if action is None:
            self._ignore(w, "unknown_action", unknown=True)
        elif w.event == "issue":
            await self._issue(w, action, echo, actor_name)
        elif echo or w.data.get("external_source") == EXTERNAL_SOURCE:
            self._ignore(w, "echo")
        elif action == "create":
            await self._comment(w, actor_name)
        else:  # an edited or deleted comment: the run already had it (or never will)
            self._ignore(w, f"comment_{action}d")
