"""Comment webhooks (``/approve``, ``/deny``, ``/stop``, a message to the run) and native agent
runs' ``stop`` signal."""

from __future__ import annotations

import re

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunStatus
from nexus_events.errors import InvalidSubject
from nexus_events.events import InboxMessage, PlaneWebhookReceived

from nexus_plane_sync import render
from nexus_plane_sync.answers import answer_approval, gate_closed, gate_policy
from nexus_plane_sync.decisions import RunState
from nexus_plane_sync.ingress.commands import RunCommands
from nexus_plane_sync.ingress.core import Unusable
from nexus_plane_sync.store import FlowGate

_DECISION = re.compile(r"^/(approve|deny)\s+(\S+)\s*(.*)$", re.DOTALL | re.IGNORECASE)
_STOP = re.compile(r"^/(stop|cancel)\b", re.IGNORECASE)


class CommentCommands(RunCommands):
    """A person's comment on a work item with an active run (or flow gate), and Plane's own
    agent runs' stop signal."""

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
                    api=self.api, teams=self.teams,
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
                api=self.api, policy=gate_policy(gate, self.default_approvers, self.teams),
            )  # fmt: skip
        except InvalidSubject as exc:
            raise Unusable("invalid_approval_id", str(exc)) from None
        self._count("gates" if won else "gates_not_decided")

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


def _pick(runs: list[RunState]) -> RunState:
    """The run a comment is for: the one waiting for an answer, else the first active."""
    return next((r for r in runs if r.status == RunStatus.AWAITING_APPROVAL), runs[0])
