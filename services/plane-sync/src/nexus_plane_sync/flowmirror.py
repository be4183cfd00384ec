"""The mirror's part for NEXUS_FLOWS: flow runs and their gates into ``flows`` /
``flow_gates``, and each event's report (`flowreports`) for the outbox.

Run inside the mirror's transaction (`PlaneMirror.apply`), so the rows, the outbox writes and
the checkpoint commit together. A flow run's task, flow and requester come from its
``requested``; the gates' approvers from the definition pinned in ``accepted``
(`GateStep.approvers`); a gate is open from its ``waiting`` until the step is resumed.
"""

from __future__ import annotations

import json

from nexus_events.contract.codec import Decoded
from nexus_events.contract.subjects import NEW_RUN_TOKEN
from nexus_events.events import (
    Event,
    FlowAccepted,
    FlowCancelled,
    FlowCompleted,
    FlowFailed,
    FlowRequested,
    FlowResumed,
    FlowStepFinished,
    FlowWaiting,
    GateStep,
)
from nexus_events.events.flows import FLOW_TERMINAL, FlowStatus
from nexus_events.transport.projection import Conn

from nexus_plane_sync.decisions import Write
from nexus_plane_sync.flowreports import flow_writes

_TERMINAL_STATUS: dict[type[Event], str] = {
    FlowCompleted: FlowStatus.COMPLETED.value,
    FlowFailed: FlowStatus.FAILED.value,
    FlowCancelled: FlowStatus.CANCELLED.value,
}
_ENDED = tuple(s.value for s in FLOW_TERMINAL)


async def apply_flow_event(conn: Conn, q: str, d: Decoded) -> list[Write]:
    """Fold one flow event into the tables; the writes it implies on the work item."""
    flow_run_id = d.address.ids.get("flow_run_id")
    name = d.address.event
    if flow_run_id is None or name is None or flow_run_id == NEW_RUN_TOKEN:
        return []
    e = d.event
    if isinstance(e, FlowRequested):
        await conn.execute(
            f"INSERT INTO {q}.flows (flow_run_id, task_id, flow, requested_by, origin)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (flow_run_id) DO UPDATE SET"
            f" task_id = coalesce({q}.flows.task_id, EXCLUDED.task_id),"
            f" flow = coalesce({q}.flows.flow, EXCLUDED.flow),"
            f" requested_by = coalesce({q}.flows.requested_by, EXCLUDED.requested_by),"
            f" origin = coalesce({q}.flows.origin, EXCLUDED.origin)",
            flow_run_id, e.task_id, e.flow, e.requested_by, str(e.origin),
        )  # fmt: skip
        return []
    await conn.execute(
        f"INSERT INTO {q}.flows (flow_run_id) VALUES ($1) ON CONFLICT DO NOTHING", flow_run_id
    )
    if isinstance(e, FlowAccepted):
        approvers = {
            s.id: list(s.approvers)
            for s in e.definition.steps
            if isinstance(s, GateStep) and s.approvers
        }
        await conn.execute(
            f"UPDATE {q}.flows SET approvers = $2::jsonb, flow = coalesce(flow, $3)"
            " WHERE flow_run_id = $1",
            flow_run_id, json.dumps(approvers), e.flow,
        )  # fmt: skip
    elif isinstance(e, FlowWaiting) and e.kind == "gate" and e.approval_id and e.gate_run_id:
        await conn.execute(
            f"INSERT INTO {q}.flow_gates (gate_run_id, approval_id, flow_run_id, step)"
            " VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            e.gate_run_id, e.approval_id, flow_run_id, e.step,
        )  # fmt: skip
    elif isinstance(e, FlowResumed | FlowStepFinished):
        await conn.execute(
            f"UPDATE {q}.flow_gates SET open = false WHERE flow_run_id = $1 AND step = $2",
            flow_run_id, e.step,
        )  # fmt: skip
    status = _TERMINAL_STATUS.get(type(e))
    if status is None:
        status = FlowStatus.WAITING if isinstance(e, FlowWaiting) else FlowStatus.RUNNING
    else:
        await conn.execute(
            f"UPDATE {q}.flow_gates SET open = false WHERE flow_run_id = $1", flow_run_id
        )
    # Terminal is final: a late event never brings a flow run back.
    row = await conn.fetchrow(
        f"UPDATE {q}.flows SET status = $2 WHERE flow_run_id = $1"
        " AND NOT (status = ANY($3::text[])) RETURNING task_id, flow",
        flow_run_id, status, list(_ENDED),
    )  # fmt: skip
    if row is None:
        row = await conn.fetchrow(
            f"SELECT task_id, flow FROM {q}.flows WHERE flow_run_id = $1", flow_run_id
        )
    assert row is not None
    return flow_writes(e, name, flow_run_id, row["task_id"], row["flow"])
