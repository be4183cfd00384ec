"""Work item webhooks: trigger labels (and the assignment) start and stop runs and flow runs,
and a person's edits (name, description, state) follow onto the task filed from the item."""

from __future__ import annotations

from typing import Any

from nexus_events.contract import subjects
from nexus_events.errors import InvalidSubject
from nexus_events.events import Column, PlaneWebhookReceived, TaskCreated, TaskMoved, TaskUpdated

from nexus_plane_sync.decisions import FROM_PLANE, PLANE_SOURCE
from nexus_plane_sync.ingress.commands import RunCommands
from nexus_plane_sync.ingress.core import Unusable, _description, log

# A work item's edited field, as the web app, the API (and older payloads) name it.
_NAME = frozenset(("name",))
_DESCRIPTION = frozenset(("description_html", "description", "description_stripped"))
_STATE = frozenset(("state_id", "state"))
_TRIGGERS = frozenset(("labels", "label_ids", "assignees", "assignee_ids"))


class WorkItemTriage(RunCommands):
    """What a work item delivery asks for: runs and flow runs to request or cancel, a task to
    file or edit."""

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
