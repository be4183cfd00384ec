"""Flow runs asked from chat and their gates (``flows``, ``flow_gates``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import asyncpg
from nexus_events.events import ChannelAddress

from nexus_channel_gateway.store.table_group import TableGroup


@dataclass(frozen=True, slots=True)
class FlowRun:
    """A flow run as the gateway knows it: where it was asked (None: not from chat), by
    whom, and its gates' approvers (`GateStep.approvers`, by step)."""

    flow_run_id: str
    flow: str | None
    origin: ChannelAddress | None
    requested_by: str | None
    origin_surface: str | None
    approvers: dict[str, list[str]]


def _flow_run(row: asyncpg.Record) -> FlowRun:
    origin = None
    if row["channel"] is not None and row["conversation"] is not None:
        origin = ChannelAddress(
            channel=row["channel"], conversation=row["conversation"], thread=row["thread"]
        )
    raw = row["approvers"]
    approvers = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
    return FlowRun(
        row["flow_run_id"], row["flow"], origin, row["requested_by"], row["origin"], approvers
    )


class FlowRecords(TableGroup):
    """Flow runs (who asked, from where, the gates' approvers) and their open gates."""

    async def flow_requested(
        self,
        flow_run_id: str,
        flow: str,
        origin: ChannelAddress | None,
        requested_by: str | None,
        origin_surface: str,
    ) -> None:
        where = (None, None, None) if origin is None else (
            origin.channel, origin.conversation, origin.thread
        )  # fmt: skip
        await self.pool.execute(
            f"INSERT INTO {self.s}.flows (flow_run_id, flow, channel, conversation, thread,"
            " requested_by, origin) VALUES ($1, $2, $3, $4, $5, $6, $7)"
            # The first request wins (a repeat under the same id changes nothing).
            " ON CONFLICT (flow_run_id) DO UPDATE SET"
            f" channel = coalesce({self.s}.flows.channel, EXCLUDED.channel),"
            f" conversation = coalesce({self.s}.flows.conversation, EXCLUDED.conversation),"
            f" thread = coalesce({self.s}.flows.thread, EXCLUDED.thread),"
            f" requested_by = coalesce({self.s}.flows.requested_by, EXCLUDED.requested_by),"
            f" origin = coalesce({self.s}.flows.origin, EXCLUDED.origin)",
            flow_run_id, flow, *where, requested_by, origin_surface,
        )  # fmt: skip

    async def flow_accepted(
        self, flow_run_id: str, flow: str, approvers: dict[str, list[str]]
    ) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.flows (flow_run_id, flow, approvers) VALUES ($1, $2, $3::jsonb)"
            f" ON CONFLICT (flow_run_id) DO UPDATE SET approvers = EXCLUDED.approvers,"
            f" flow = coalesce({self.s}.flows.flow, EXCLUDED.flow)",
            flow_run_id, flow, json.dumps(approvers),
        )  # fmt: skip

    async def flow(self, flow_run_id: str) -> FlowRun | None:
        row = await self.pool.fetchrow(
            f"SELECT * FROM {self.s}.flows WHERE flow_run_id = $1", flow_run_id
        )
        return None if row is None else _flow_run(row)

    async def gate_opened(self, gate_run_id: str, flow_run_id: str, step: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            # A flow asked elsewhere (no `requested` seen here) still gets a row to join.
            await conn.execute(
                f"INSERT INTO {self.s}.flows (flow_run_id) VALUES ($1) ON CONFLICT DO NOTHING",
                flow_run_id,
            )
            await conn.execute(
                f"INSERT INTO {self.s}.flow_gates (gate_run_id, flow_run_id, step)"
                " VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                gate_run_id, flow_run_id, step,
            )  # fmt: skip

    async def gate(self, gate_run_id: str) -> tuple[FlowRun, str] | None:
        """The flow run and step a gate's pseudo-run belongs to (None: not a known gate)."""
        row = await self.pool.fetchrow(
            f"SELECT f.*, g.step FROM {self.s}.flow_gates g"
            f" JOIN {self.s}.flows f USING (flow_run_id) WHERE g.gate_run_id = $1",
            gate_run_id,
        )
        return None if row is None else (_flow_run(row), str(row["step"]))

    async def close_gates(self, flow_run_id: str, step: str | None = None) -> None:
        """The flow run's gates (of `step`; None: all) wait no more."""
        await self.pool.execute(
            f"UPDATE {self.s}.flow_gates SET open = false WHERE flow_run_id = $1"
            " AND ($2::text IS NULL OR step = $2)",
            flow_run_id,
            step,
        )

    async def gate_closed(self, gate_run_id: str) -> bool:
        """True for a known gate that no longer waits (False: open, or not a gate)."""
        value = await self.pool.fetchval(
            f"SELECT NOT open FROM {self.s}.flow_gates WHERE gate_run_id = $1", gate_run_id
        )
        return bool(value)
