"""Plane -> Nexus: what each filed webhook asks for, published as Nexus commands.

- A work item that gains a trigger label (``agent:<agent id>``, on create or on a label
  change) requests a run of that agent on the item's task (a task filed from the item first,
  ``external_source`` "plane"); losing the label cancels that agent's active runs there.
- A comment on a work item with an active run: ``/approve <id> [note]`` and
  ``/deny <id> [note]`` answer an approval if no other surface did first (`answers`),
  ``/stop`` cancels, anything else goes to the run's inbox as a message from that person.
- A native agent run's ``stop`` signal cancels the Nexus run behind it.
Echoes (changes made with plane-sync's own API key, comments it wrote) are recognised by the
actor and by ``external_source`` and ignored, except that label state is still recorded.
Every command's ``Nats-Msg-Id`` derives from the delivery or the Plane object, so a redelivered
webhook publishes nothing twice. A webhook that cannot be understood is dead-lettered.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from nexus_events import subjects
from nexus_events.bus import Bus, ConsumerSpec
from nexus_events.errors import InvalidSubject
from nexus_events.events import (
    CancelRequested,
    Column,
    InboxMessage,
    Origin,
    PlaneWebhookReceived,
    Reason,
    RunRequested,
    TaskCreated,
    TaskMoved,
    TaskUpdated,
)
from nexus_events.events.base import Event
from nexus_events.fast import Reject, Retry
from nexus_events.streams import PLANE

from nexus_plane_sync import render
from nexus_plane_sync.answers import answer_approval
from nexus_plane_sync.decisions import FROM_PLANE, PLANE_SOURCE, RunState
from nexus_plane_sync.errors import PlaneUnavailable
from nexus_plane_sync.metrics import PlaneSyncMetrics
from nexus_plane_sync.plane_api import EXTERNAL_SOURCE, PlaneApi
from nexus_plane_sync.store import PlaneStore

log = logging.getLogger(__name__)

_DECISION = re.compile(r"^/(approve|deny)\s+(\S+)\s*(.*)$", re.DOTALL | re.IGNORECASE)
_STOP = re.compile(r"^/(stop|cancel)\b", re.IGNORECASE)


class Unusable(ValueError):  # noqa: N818 - a verdict on the webhook
    """The webhook cannot be acted on (dead-lettered with `reason`)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


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


class PlaneIngress:
    def __init__(
        self,
        bus: Bus,
        store: PlaneStore,
        api: PlaneApi,
        metrics: PlaneSyncMetrics,
        *,
        trigger_prefix: str,
        bot_user_id: str | None,
        assign_agent: str | None = None,
        state_map: dict[str, str] | None = None,
        mirrored: Callable[[dict[str, int]], Awaitable[None]] | None = None,
    ) -> None:
        self.bus = bus
        self.store = store
        self.api = api
        self.metrics = metrics
        self.prefix = trigger_prefix
        self.bot_user_id = bot_user_id
        self.assign_agent = assign_agent
        # Read-your-writes: the highest sequence this ingress published to each stream, and
        # how to wait until the mirror (whose tables say which runs are active) applied it.
        # Without it, a label removed right after it requested a run finds no run to cancel.
        self.published: dict[str, int] = {}
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

    async def on_webhook(self, event: Event) -> None:
        """FastStream handler of the webhook durable (`nexus_events.fast`): one filed webhook
        at a time, in stream order (subscribed with ``ordered=True``)."""
        if not isinstance(event, PlaneWebhookReceived):
            raise Reject("unexpected_event", f"{type(event).__name__} on the webhook consumer")
        if self.mirrored is not None and self.published:
            await self.mirrored(dict(self.published))
        try:
            await self.handle(event)
        except Unusable as exc:
            self.metrics.webhooks["unusable"] += 1
            raise Reject(exc.reason, str(exc)) from None
        except PlaneUnavailable as exc:
            log.warning("webhook %s waits for Plane: %s", event.delivery_id, exc)
            raise Retry(5.0, f"Plane unavailable: {exc}") from None

    async def handle(self, w: PlaneWebhookReceived) -> None:
        actor_id, actor_name = _actor(w.activity)
        echo = actor_id is not None and actor_id == await self.bot()
        if w.event == "issue":
            await self._issue(w, echo, actor_name)
        elif w.event == "issue_comment":
            if echo or w.data.get("external_source") == EXTERNAL_SOURCE:
                self.metrics.webhooks["echo"] += 1
                return
            if w.action == "create":
                await self._comment(w, actor_name)
        elif w.event.startswith("agent_run"):
            if not echo:
                await self._agent_run_signal(w, actor_name)
        else:
            self.metrics.webhooks["ignored"] += 1

    async def _publish(self, subject: str, event: Event, *, msg_id: str) -> None:
        ack = await self.bus.publish(subject, event, msg_id=msg_id)
        if ack.seq > self.published.get(ack.stream, 0):
            self.published[ack.stream] = ack.seq

    # -- work items ---------------------------------------------------------------------------

    async def _labels(self, data: dict[str, Any]) -> list[str]:
        raw = data.get("labels")
        if raw is None:
            raw = data.get("label_ids", [])
        if not isinstance(raw, list):
            raise Unusable("invalid_webhook", "issue webhook whose labels are not a list")
        names = [str(x["name"]) for x in raw if isinstance(x, dict) and "name" in x]
        ids = [str(x) for x in raw if isinstance(x, str)]
        if ids:
            names += await self.api.label_names(ids)
        return names

    async def _assigned_to_us(self, data: dict[str, Any]) -> bool:
        raw = data.get("assignees")
        if raw is None:
            raw = data.get("assignee_ids", [])
        if not isinstance(raw, list):
            return False
        ids = {str(a.get("id")) if isinstance(a, dict) else str(a) for a in raw}
        bot = await self.bot()
        return bot is not None and bot in ids

    def _agents(self, labels: list[str]) -> set[str]:
        return {lab[len(self.prefix) :] for lab in labels if lab.startswith(self.prefix)}

    async def _triggers(self, w: PlaneWebhookReceived) -> list[str]:
        """The work item's labels, plus the assignment trigger as a label when it is on."""
        if w.action == "delete":
            return []
        labels = await self._labels(w.data)
        if self.assign_agent is not None and await self._assigned_to_us(w.data):
            # Assignment to our user counts as the agent's trigger label (set and unset).
            labels.append(f"{self.prefix}{self.assign_agent}")
        return labels

    async def _issue(self, w: PlaneWebhookReceived, echo: bool, actor: str | None) -> None:
        item = w.data.get("id")
        if not isinstance(item, str) or not item:
            raise Unusable("invalid_webhook", "issue webhook without data.id")
        labels = await self._triggers(w)
        before = await self.store.swap_labels(item, labels)
        if echo:
            self.metrics.webhooks["echo"] += 1
            return
        now, was = self._agents(labels), self._agents(before or [])
        task_id = await self.store.task_of_work_item(item)
        if task_id is not None:
            for run in await self.store.active_runs(task_id):
                if run.agent_id in was - now:
                    await self._cancel(run.run_id, actor, w.delivery_id)
        added = sorted(now - was)
        for agent in added:
            try:
                subjects.validate_token(agent, "agent id")
            except InvalidSubject as exc:
                raise Unusable("invalid_agent_label", str(exc)) from None
        if added and task_id is None:
            task_id = await self._file_task(item, w.data, labels, actor)
        if task_id is not None and w.action == "update":
            await self._edit_task(w, task_id, actor)
        for agent in added:
            assert task_id is not None
            await self._request_run(w, item, task_id, agent, actor)

    async def _edit_task(self, w: PlaneWebhookReceived, task_id: str, actor: str | None) -> None:
        """A person renamed, re-described or moved the work item: the task follows."""
        field = w.activity.get("field")
        who = f"{FROM_PLANE}{actor or 'someone'}"
        if field == "name" and w.data.get("name"):
            event: TaskUpdated | TaskMoved = TaskUpdated(
                title=str(w.data["name"])[:255], updated_by=who
            )
        elif field == "description":
            event = TaskUpdated(description=_description(w.data), updated_by=who)
        elif field == "state" and isinstance(w.data.get("state"), str):
            name = await self.api.state_name(w.data["state"])
            column = self.columns.get(name or "")
            if column is None:
                return
            event = TaskMoved(column=column, moved_by=who)
        else:
            return
        name = "updated" if isinstance(event, TaskUpdated) else "moved"
        await self._publish(
            subjects.task_event(task_id, name), event, msg_id=f"plane:{name}:{w.delivery_id}"
        )
        self.metrics.webhooks[f"tasks_{name}"] += 1

    async def _request_run(
        self, w: PlaneWebhookReceived, item: str, task_id: str, agent: str, actor: str | None
    ) -> None:
        run_id = f"plane-{w.delivery_id}-{agent}"[:128]
        try:
            subject = subjects.run_event(run_id, "requested")
        except InvalidSubject as exc:
            raise Unusable("invalid_webhook", f"delivery id unusable as run id: {exc}") from None
        await self._publish(
            subject,
            RunRequested(
                agent_id=agent,
                task_id=task_id,
                input=_instructions(w.data),
                origin=Origin.PLANE,
                requested_by=actor,
                labels={"plane_work_item": item},
            ),
            msg_id=f"plane:requested:{run_id}",
        )
        self.metrics.webhooks["runs_requested"] += 1

    async def _file_task(
        self, item: str, data: dict[str, Any], labels: list[str], actor: str | None
    ) -> str:
        task_id = f"plane-{item}"[:128]
        try:
            subject = subjects.task_event(task_id, "created")
        except InvalidSubject as exc:
            raise Unusable("invalid_webhook", f"work item id unusable as task id: {exc}") from None
        title = str(data.get("name") or f"Plane work item {item}")[:255]
        await self._publish(
            subject,
            TaskCreated(
                title=title,
                description=_description(data),
                column=Column.TODO,
                labels=labels,
                created_by=actor,
                external_id=item,
                external_source=PLANE_SOURCE,
            ),
            msg_id=f"plane:task:{item}",
        )
        return task_id

    # -- comments -----------------------------------------------------------------------------

    async def _comment(self, w: PlaneWebhookReceived, actor: str | None) -> None:
        item = w.data.get("issue")
        comment_id = str(w.data.get("id") or w.delivery_id)
        if not isinstance(item, str):
            raise Unusable("invalid_webhook", "comment webhook without data.issue")
        text = render.plain_text(
            str(w.data.get("comment_html") or w.data.get("comment_stripped") or "")
        )
        if not text:
            return
        task_id = await self.store.task_of_work_item(item)
        runs = [] if task_id is None else await self.store.active_runs(task_id)
        if not runs:
            self.metrics.webhooks["comment_without_run"] += 1
            return
        run = _pick(runs)
        if _STOP.match(text):
            await self._cancel(run.run_id, actor, comment_id)
            return
        decision = _DECISION.match(text)
        if decision is not None:
            verb, approval_id, note = decision.groups()
            try:
                won = await answer_approval(
                    self.bus, self.store, run_id=run.run_id, task_id=task_id,
                    approval_id=approval_id, decision=verb.lower(), decided_by=actor,
                    note=note.strip() or None, comment_id=comment_id,
                    actor=w.activity.get("actor"),
                )  # fmt: skip
            except InvalidSubject as exc:
                raise Unusable("invalid_approval_id", str(exc)) from None
            self.metrics.webhooks["approvals" if won else "approvals_already_decided"] += 1
            return
        await self._publish(
            subjects.inbox(run.run_id),
            InboxMessage(text=text, sender=actor, sender_kind="human", message_id=comment_id),
            msg_id=f"plane:comment:{comment_id}",
        )
        self.metrics.webhooks["messages"] += 1

    # -- native agent runs --------------------------------------------------------------------

    async def _agent_run_signal(self, w: PlaneWebhookReceived, actor: str | None) -> None:
        signal = w.data.get("signal") or (w.data.get("activity") or {}).get("signal")
        if signal != "stop":
            return
        plane_run = w.data.get("agent_run") or w.data.get("id")
        run_id = None
        if isinstance(plane_run, str):
            run_id = await self.store.key_of(plane_run, "agentrun:")
        if run_id is None:
            self.metrics.webhooks["stop_without_run"] += 1
            return
        await self._cancel(run_id, actor, w.delivery_id)

    async def _cancel(self, run_id: str, actor: str | None, cause: str) -> None:
        await self._publish(
            subjects.run_event(run_id, "cancel_requested"),
            CancelRequested(reason=Reason.USER_REQUESTED, requested_by=actor or "plane"),
            msg_id=f"plane:cancel:{run_id}:{cause}",
        )
        self.metrics.webhooks["cancels"] += 1


def _pick(runs: list[RunState]) -> RunState:
    """The run a comment is for: the one waiting for an answer, else the first active."""
    return next((r for r in runs if r.status == "awaiting_approval"), runs[0])


def _description(data: dict[str, Any]) -> str:
    if data.get("description_stripped"):
        return str(data["description_stripped"])
    return render.plain_text(str(data.get("description_html") or ""))


def _instructions(data: dict[str, Any]) -> str:
    name = str(data.get("name") or "").strip()
    body = _description(data)
    return f"{name}\n\n{body}".strip()
