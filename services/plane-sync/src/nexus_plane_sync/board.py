"""Executing one outbox write on Plane: work items, and a run's reports behind one interface.

`Board.execute` takes a pending write and makes it on Plane idempotently:
- work items are found by ``external_id`` (the task id) before being created, and a create
  that races answers 409 with the existing id; updates are PATCHes of the changed fields;
- a run's reports go through a `RunReporter`: `CommentReporter` (every Plane edition: one
  comment per report, ``external_id`` = the write id, so a repeat is a 409) or
  `AgentRunReporter` (Plane's native agent runs: one run per Nexus run, an activity per report,
  tagged with the write id in ``content_metadata`` and looked up before a retry posts again;
  a delegated child run's reports are activities of its root run's Plane agent run).
Every Plane id written is remembered (`PlaneStore.remember`), so a write done once is not
done again after a restart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from nexus_events.events import WriteOp

from nexus_plane_sync import render
from nexus_plane_sync.decisions import PLANE_SOURCE
from nexus_plane_sync.errors import NotReady
from nexus_plane_sync.plane_api import EXTERNAL_SOURCE, PlaneApi
from nexus_plane_sync.store import Pending, PlaneStore

Mode = Literal["comments", "agent_runs"]


@dataclass(frozen=True)
class Outcome:
    """What a write did: the Plane object, and whether Plane already had it (409/lookup)."""

    plane_id: str | None
    existed: bool = False


class WorkItems:
    """Tasks as work items: find or create, then patch."""

    def __init__(
        self,
        api: PlaneApi,
        store: PlaneStore,
        *,
        state_map: dict[str, str],
        mirror_tasks: bool,
    ) -> None:
        self.api = api
        self.store = store
        self.state_map = state_map
        self.mirror_tasks = mirror_tasks

    async def _task(self, task_id: str) -> Any:
        """The task's row; `NotReady` while the mirror has not seen it."""
        task = await self.store.task(task_id)
        if task is None:
            raise NotReady(f"task {task_id} is not known yet")
        return task

    async def _fields(self, task: Any, payload: dict[str, Any], full: bool) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if full or "name" in payload:
            body["name"] = str(payload.get("name", task["title"]))[:255]
        if full or "description" in payload:
            body["description_html"] = render.paragraphs(
                str(payload.get("description", task["description"]))
            )
        column = payload.get("column", task["col"] if full else None)
        if column is not None and column in self.state_map:
            state = await self.api.state_id(self.state_map[column])
            if state is not None:
                body["state"] = state
        if full or "labels" in payload:
            labels = payload.get("labels")
            if labels is None:
                labels = json.loads(task["labels"]) if isinstance(task["labels"], str) else []
            body["labels"] = await self.api.label_ids([str(x) for x in labels])
        return body

    async def item_of(self, task_id: str) -> str | None:
        """The work item of `task_id`, created if the task is mirrored and has none yet.
        None: the task is not mirrored (tasks from the CLI with mirroring off)."""
        known = await self.store.object(f"item:{task_id}")
        if known is not None:
            return known
        task = await self._task(task_id)
        if task["external_source"] == PLANE_SOURCE and task["external_id"]:
            await self.store.remember(f"item:{task_id}", task["external_id"])
            return str(task["external_id"])
        if not self.mirror_tasks:
            return None
        found = await self.api.find_work_item(task_id)
        if found is None:
            body = await self._fields(task, {}, full=True)
            created = await self.api.create_work_item(
                {**body, "external_id": task_id, "external_source": EXTERNAL_SOURCE}
            )
            found = created.id
        await self.store.remember(f"item:{task_id}", found)
        return found

    async def upsert(self, row: Pending) -> Outcome:
        task = await self._task(row.task_id)
        if task["deleted"]:
            return Outcome(None)
        known = await self.store.object(f"item:{row.task_id}")
        item = await self.item_of(row.task_id)
        if item is None:
            return Outcome(None)
        # A new item got the task's current fields from item_of; the payload's changes (or,
        # for a resync, every field) are patched on top.
        body = await self._fields(task, row.payload, full=bool(row.payload.get("resync")))
        if body:
            await self.api.update_work_item(item, body)
        return Outcome(item, existed=known is not None)

    async def delete(self, row: Pending) -> Outcome:
        item = await self.store.object(f"item:{row.task_id}")
        if item is None:
            item = await self.api.find_work_item(row.task_id)
        if item is not None:
            await self.api.delete_work_item(item)
        return Outcome(item)


class RunReporter(Protocol):
    """How a run's reports (started, progress, approval, result, end) show on Plane."""

    mode: Mode

    def op_of(self, row: Pending) -> WriteOp | None:
        """The write a report becomes (None: this reporter has nothing to write for it)."""

    async def report(self, row: Pending, item: str) -> Outcome:
        """Write the report on work item `item`."""


class CommentReporter:
    """Reports as comments on the work item (every Plane edition)."""

    mode: Mode = "comments"

    def __init__(self, api: PlaneApi, store: PlaneStore) -> None:
        self.api = api
        self.store = store

    def op_of(self, row: Pending) -> WriteOp | None:
        return "comment"

    async def report(self, row: Pending, item: str) -> Outcome:
        external_id = str(row.payload.get("external_id") or row.write_id)
        key = f"comment:{external_id}"
        html = str(row.payload.get("html", ""))
        known = await self.store.object(key)
        if known is not None:  # the run's progress comment: edited in place
            await self.api.update_comment(item, known, html)
            return Outcome(known, existed=True)
        created = await self.api.create_comment(item, html, external_id)
        await self.store.remember(key, created.id)
        if created.existed and row.payload.get("kind") == "progress":
            await self.api.update_comment(item, created.id, html)
        return Outcome(created.id, existed=created.existed)


class AgentRunReporter:
    """Reports as Plane's native agent run of the work item and its activities."""

    mode: Mode = "agent_runs"

    def __init__(self, api: PlaneApi, store: PlaneStore, agent_slug: str) -> None:
        self.api = api
        self.store = store
        self.agent_slug = agent_slug

    def op_of(self, row: Pending) -> WriteOp | None:
        if "activity" not in row.payload:
            return None  # progress edits: activities cannot be edited, and turns are noise
        return "agent_activity"

    async def report(self, row: Pending, item: str) -> Outcome:
        # A delegated child reports into its root run's Plane agent run (see `children`).
        run_key = f"agentrun:{row.payload.get('agent_run_of') or row.run_id}"
        plane_run = await self.store.object(run_key)
        if plane_run is None:
            plane_run = await self.api.create_agent_run(self.agent_slug, item)
            await self.store.remember(run_key, plane_run)
        key = f"activity:{row.write_id}"
        known = await self.store.object(key)
        if known is not None:
            return Outcome(known, existed=True)
        if row.attempts > 0:
            # An earlier try may have landed before the process stopped: look first.
            for activity in await self.api.activities(plane_run):
                meta = activity.get("content_metadata") or {}
                if meta.get("nexus_write_id") == row.write_id:
                    await self.store.remember(key, str(activity["id"]))
                    return Outcome(str(activity["id"]), existed=True)
        kind = str(row.payload["activity"])
        created = await self.api.create_activity(
            plane_run,
            {
                "type": kind,
                "content": {"type": kind, "body": str(row.payload.get("body", ""))},
                "content_metadata": {"nexus_write_id": row.write_id},
            },
        )
        await self.store.remember(key, created)
        return Outcome(created)


class Board:
    """The one entry point of the writer: which write a row is, and doing it."""

    def __init__(self, items: WorkItems, reporter: RunReporter) -> None:
        self.items = items
        self.reporter = reporter

    @property
    def mode(self) -> Mode:
        return self.reporter.mode

    async def check_ready(self, row: Pending) -> None:
        """Raise `NotReady` while the row's task is not known (nothing is written then)."""
        await self.items._task(row.task_id)

    def op_of(self, row: Pending) -> WriteOp | None:
        if row.op == "work_item_upsert":
            return "work_item_upsert"
        if row.op == "work_item_delete":
            return "work_item_delete"
        return self.reporter.op_of(row)

    async def execute(self, row: Pending) -> Outcome:
        if row.op == "work_item_upsert":
            return await self.items.upsert(row)
        if row.op == "work_item_delete":
            return await self.items.delete(row)
        item = await self.items.item_of(row.task_id)
        if item is None:
            return Outcome(None)
        return await self.reporter.report(row, item)
