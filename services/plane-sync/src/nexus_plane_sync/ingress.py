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

import logging
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from nats.js.api import PubAck
from nexus_events import subjects
from nexus_events.approver_policy import DEFAULT_PRINCIPALS
from nexus_events.bus import Bus, ConsumerSpec
from nexus_events.errors import InvalidSubject
from nexus_events.events import (
    CancelRequested,
    Column,
    FlowCancelRequested,
    FlowRequested,
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
from nexus_events.run_requests import request_flow, request_run
from nexus_events.runstate import RunEvent, RunStatus
from nexus_events.streams import PLANE

from nexus_plane_sync import render
from nexus_plane_sync.answers import answer_approval, gate_closed, gate_policy
from nexus_plane_sync.decisions import FROM_PLANE, PLANE_SOURCE, RunState
from nexus_plane_sync.errors import PlaneUnavailable
from nexus_plane_sync.metrics import IGNORED_PREFIX, PlaneSyncMetrics
from nexus_plane_sync.plane_api import EXTERNAL_SOURCE, PlaneApi
from nexus_plane_sync.store import FlowGate, PlaneStore

log = logging.getLogger(__name__)
# Who asks, in the message id of the runs and flow runs a webhook requests.
SOURCE = "plane"

_DECISION = re.compile(r"^/(approve|deny)\s+(\S+)\s*(.*)$", re.DOTALL | re.IGNORECASE)
_STOP = re.compile(r"^/(stop|cancel)\b", re.IGNORECASE)

# Plane's verbs, and the HTTP-method words Plane before v0.20 sent (harmless to keep).
_ACTIONS = {
    "created": "create", "updated": "update", "deleted": "delete",
    "create": "create", "update": "update", "delete": "delete",
}  # fmt: skip
# Events Plane sends that plane-sync has no use for (webhook_task.py's SERIALIZER_MAPPER).
_NOT_FOLLOWED = frozenset(
    ("project", "cycle", "module", "cycle_issue", "module_issue", "user", "intake_issue")
)
# A work item's edited field, as the web app, the API (and older payloads) name it.
_NAME = frozenset(("name",))
_DESCRIPTION = frozenset(("description_html", "description", "description_stripped"))
_STATE = frozenset(("state_id", "state"))
_TRIGGERS = frozenset(("labels", "label_ids", "assignees", "assignee_ids"))


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
        flow_prefix: str = "flow:",
        bot_user_id: str | None,
        assign_agent: str | None = None,
        state_map: dict[str, str] | None = None,
        mirrored: Callable[[dict[str, int]], Awaitable[None]] | None = None,
        default_approvers: tuple[str, ...] = DEFAULT_PRINCIPALS,
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

    async def on_webhook(self, event: Event) -> None:
        """FastStream handler of the webhook durable (`nexus_events.fast`): one filed webhook
        at a time, in stream order (subscribed with ``ordered=True``)."""
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

    async def _publish(self, subject: str, event: Event, *, msg_id: str) -> None:
        self._stored(await self.bus.publish(subject, event, msg_id=msg_id))

    def _stored(self, ack: PubAck) -> None:
        if ack.seq > self.published.get(ack.stream, 0):
            self.published[ack.stream] = ack.seq

    # -- work items ---------------------------------------------------------------------------

    async def _labels(self, data: dict[str, Any]) -> list[str] | None:
        """The work item's label names (None: the payload does not say)."""
        raw = data.get("labels")
        if raw is None:
            raw = data.get("label_ids")
        if raw is None:
            return None
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

    def _flows(self, labels: list[str]) -> set[str]:
        p = self.flow_prefix
        return {lab[len(p) :] for lab in labels if lab.startswith(p)}

    async def _triggers(self, w: PlaneWebhookReceived, action: str) -> list[str] | None:
        """The work item's labels, plus the assignment trigger as a label when it is on
        (None: the payload does not carry the labels)."""
        if action == "delete":
            return []
        labels = await self._labels(w.data)
        if labels is None:
            return None
        if self.assign_agent is not None and await self._assigned_to_us(w.data):
            # Assignment to our user counts as the agent's trigger label (set and unset).
            labels.append(f"{self.prefix}{self.assign_agent}")
        return labels

    async def _issue(
        self, w: PlaneWebhookReceived, action: str, echo: bool, actor: str | None
    ) -> None:
        item = w.data.get("id")
        if not isinstance(item, str) or not item:
            raise Unusable("invalid_webhook", "issue webhook without data.id")
        labels = await self._triggers(w, action)
        if labels is None:
            # Not Plane's shape: leave the labels as last seen (no run started or stopped).
            log.warning("webhook %s: issue without labels; triggers unchanged", w.delivery_id)
            now = was = flows_now = flows_was = set()
        else:
            before = await self.store.swap_labels(item, labels)
            now, was = self._agents(labels), self._agents(before or [])
            flows_now, flows_was = self._flows(labels), self._flows(before or [])
        if echo:
            self._ignore(w, "echo")
            return
        task_id = await self.store.task_of_work_item(item)
        if task_id is not None:
            await self._untriggered(task_id, was - now, flows_was - flows_now, actor, w)
        added = _valid_agents(now - was)
        added_flows = _valid_agents(flows_now - flows_was, "flow id")
        if (added or added_flows) and task_id is None:
            task_id = await self._file_task(item, w.data, labels or [], actor)
        if task_id is not None and action == "update":
            await self._edit_task(w, task_id, actor)
        for agent in added:
            assert task_id is not None
            await self._request_run(w, item, task_id, agent, actor)
        for flow in added_flows:
            assert task_id is not None
            await self._request_flow(w, item, task_id, flow, actor)
        if not self._counts:
            self._ignore(w, _why_not(action, task_id, w.activity.get("field")))

    async def _untriggered(
        self,
        task_id: str,
        agents: set[str],
        flows: set[str],
        actor: str | None,
        w: PlaneWebhookReceived,
    ) -> None:
        """Cancel the task's active runs of the `agents` and flow runs of the `flows` whose
        trigger labels were removed."""
        for run in await self.store.active_runs(task_id) if agents else ():
            if run.agent_id in agents:
                await self._cancel(run.run_id, actor, w.delivery_id)
        for flow_run_id, flow in await self.store.active_flows(task_id) if flows else ():
            if flow in flows:
                await self._cancel_flow(flow_run_id, actor, w.delivery_id)

    async def _edit_task(self, w: PlaneWebhookReceived, task_id: str, actor: str | None) -> None:
        """A person renamed, re-described or moved the work item: the task follows."""
        field = w.activity.get("field")
        who = f"{FROM_PLANE}{actor or 'someone'}"
        if field in _NAME and w.data.get("name"):
            event: TaskUpdated | TaskMoved = TaskUpdated(
                title=str(w.data["name"])[:255], updated_by=who
            )
        elif field in _DESCRIPTION:
            event = TaskUpdated(description=_description(w.data), updated_by=who)
        elif field in _STATE:
            column = await self._column(w)
            if column is None:
                return
            event = TaskMoved(column=column, moved_by=who)
        else:
            return
        name = "updated" if isinstance(event, TaskUpdated) else "moved"
        await self._publish(
            subjects.task_event(task_id, name), event, msg_id=f"plane:{name}:{w.delivery_id}"
        )
        self._count(f"tasks_{name}")

    async def _column(self, w: PlaneWebhookReceived) -> Column | None:
        """The board column of the work item's state (None: counted as ignored)."""
        state = w.data.get("state")
        if isinstance(state, dict) and isinstance(state.get("name"), str):
            name: str | None = state["name"]  # Plane: StateLiteSerializer {id, name, ...}
        elif isinstance(state, str):
            name = await self.api.state_name(state)  # older payloads: the state's id
        else:
            self._ignore(w, "unknown_state_shape", unknown=True)
            return None
        column = self.columns.get((name or "").casefold())
        if column is None:
            self._ignore(w, "state_not_mapped")
        return column

    async def _request_run(
        self, w: PlaneWebhookReceived, item: str, task_id: str, agent: str, actor: str | None
    ) -> None:
        run_id = f"plane-{w.delivery_id}-{agent}"[:128]
        request = RunRequested(
            agent_id=agent,
            task_id=task_id,
            input=_instructions(w.data),
            origin=Origin.PLANE,
            requested_by=actor,
            labels={"plane_work_item": item},
        )
        try:
            ack = await request_run(self.bus, run_id, request, source=SOURCE)
        except InvalidSubject as exc:  # raised before anything is sent
            raise Unusable("invalid_webhook", f"delivery id unusable as run id: {exc}") from None
        self._stored(ack)
        self._count("runs_requested")

    async def _request_flow(
        self, w: PlaneWebhookReceived, item: str, task_id: str, flow: str, actor: str | None
    ) -> None:
        # Derived from the delivery like a run's id: a redelivered webhook asks for the same
        # flow run, and JetStream drops the repeat.
        flow_run_id = f"plane-{w.delivery_id}-flow-{flow}"[:128]
        request = FlowRequested(
            flow=flow,
            task_id=task_id,
            input=_instructions(w.data),
            origin=Origin.PLANE,
            requested_by=actor,
            labels={"plane_work_item": item},
        )
        try:
            ack = await request_flow(self.bus, flow_run_id, request, source=SOURCE)
        except InvalidSubject as exc:  # raised before anything is sent
            why = f"delivery id unusable as flow run id: {exc}"
            raise Unusable("invalid_webhook", why) from None
        self._stored(ack)
        self._count("flows_requested")

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
            self._ignore(w, "empty_comment")
            return
        task_id = await self.store.task_of_work_item(item)
        decision = _DECISION.match(text)
        if decision is not None and task_id is not None:
            gate = await self.store.flow_gate(task_id, decision[2])
            if gate is not None:
                await self._answer_gate(w, gate, task_id, decision.groups(), actor, comment_id)
                return
        runs = [] if task_id is None else await self.store.active_runs(task_id)
        if not runs:
            self._ignore(w, "comment_without_run")
            return
        run = _pick(runs)
        if _STOP.match(text):
            await self._cancel(run.run_id, actor, comment_id)
            return
        if decision is not None:
            verb, approval_id, note = decision.groups()
            try:
                won = await answer_approval(
                    self.bus, self.store, run_id=run.run_id, task_id=task_id,
                    approval_id=approval_id, decision=verb.lower(), decided_by=actor,
                    note=note.strip() or None, comment_id=comment_id,
                    actor=w.activity.get("actor"), default_approvers=self.default_approvers,
                    api=self.api,
                )  # fmt: skip
            except InvalidSubject as exc:
                raise Unusable("invalid_approval_id", str(exc)) from None
            self._count("approvals" if won else "approvals_already_decided")
            return
        await self._publish(
            subjects.inbox(run.run_id),
            InboxMessage(text=text, sender=actor, sender_kind="human", message_id=comment_id),
            msg_id=f"plane:comment:{comment_id}",
        )
        self._count("messages")

    async def _answer_gate(  # noqa: PLR0917 - the comment's parts, as `_comment` has them
        self,
        w: PlaneWebhookReceived,
        gate: FlowGate,
        task_id: str,
        groups: tuple[str, ...],
        actor: str | None,
        comment_id: str,
    ) -> None:
        """A flow gate answered like a run's approval: the gate's pseudo-run is the run
        (claim and decision on its inbox), the flow's request says who asked."""
        verb, approval_id, note = groups
        if not gate.open:
            await gate_closed(self.bus, self.store, gate, task_id, comment_id)
            self._count("gates_closed")
            return
        try:
            won = await answer_approval(
                self.bus, self.store, run_id=gate.gate_run_id, task_id=task_id,
                approval_id=approval_id, decision=verb.lower(), decided_by=actor,
                note=note.strip() or None, comment_id=comment_id,
                actor=w.activity.get("actor"), default_approvers=self.default_approvers,
                api=self.api, policy=gate_policy(gate, self.default_approvers),
            )  # fmt: skip
        except InvalidSubject as exc:
            raise Unusable("invalid_approval_id", str(exc)) from None
        self._count("gates" if won else "gates_not_decided")

    async def _cancel_flow(self, flow_run_id: str, actor: str | None, cause: str) -> None:
        await self._publish(
            subjects.flow_event(flow_run_id, FlowCancelRequested),
            FlowCancelRequested(requested_by=actor or "plane"),
            msg_id=f"plane:flow_cancel:{flow_run_id}:{cause}",
        )
        self._count("flow_cancels")

    # -- native agent runs --------------------------------------------------------------------

    async def _agent_run_signal(self, w: PlaneWebhookReceived, actor: str | None) -> None:
        signal = w.data.get("signal") or (w.data.get("activity") or {}).get("signal")
        if signal != "stop":
            self._ignore(w, "not_a_stop_signal")
            return
        plane_run = w.data.get("agent_run") or w.data.get("id")
        run_id = None
        if isinstance(plane_run, str):
            run_id = await self.store.key_of(plane_run, "agentrun:")
        if run_id is None:
            self._ignore(w, "stop_without_run")
            return
        await self._cancel(run_id, actor, w.delivery_id)

    async def _cancel(self, run_id: str, actor: str | None, cause: str) -> None:
        await self._publish(
            subjects.run_event(run_id, RunEvent.CANCEL_REQUESTED),
            CancelRequested(reason=Reason.USER_REQUESTED, requested_by=actor or "plane"),
            msg_id=f"plane:cancel:{run_id}:{cause}",
        )
        self._count("cancels")


def _pick(runs: list[RunState]) -> RunState:
    """The run a comment is for: the one waiting for an answer, else the first active."""
    return next((r for r in runs if r.status == RunStatus.AWAITING_APPROVAL), runs[0])


def _valid_agents(agents: set[str], what: str = "agent id") -> list[str]:
    """The agents (or flows) of added trigger labels, sorted; a label that names no id is an
    unusable webhook (dead-lettered)."""
    for agent in agents:
        try:
            subjects.validate_token(agent, what)
        except InvalidSubject as exc:
            raise Unusable("invalid_agent_label", str(exc)) from None
    return sorted(agents)


def _why_not(action: str, task_id: str | None, field: object) -> str:
    """Why a work item delivery made no command (nothing else said why)."""
    if action == "create":
        return "no_trigger_label"
    if action == "delete":
        return "work_item_deleted"
    if task_id is None:
        return "not_a_task"
    return "no_trigger_change" if field in _TRIGGERS else "field_not_followed"


def _description(data: dict[str, Any]) -> str:
    if data.get("description_stripped"):
        return str(data["description_stripped"])
    return render.plain_text(str(data.get("description_html") or ""))


def _instructions(data: dict[str, Any]) -> str:
    name = str(data.get("name") or "").strip()
    body = _description(data)
    return f"{name}\n\n{body}".strip()
