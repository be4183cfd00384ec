"""Delegations (``delegations``): where a child run's ending goes and its chain of agents."""

from __future__ import annotations

from dataclasses import dataclass

from nexus_channel_gateway.store.table_group import TableGroup


@dataclass(frozen=True, slots=True)
class Delegation:
    child_run_id: str
    parent_run_id: str | None
    reply_to: str | None
    correlation_id: str
    chain: tuple[str, ...]  # agents from the root run to the child (the root's when known)
    depth: int  # delegated runs from the root run to the child, the child included


class DelegationRecords(TableGroup):
    """Child runs requested by a delegation, by child run id."""

    async def record_delegation(self, d: Delegation) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.delegations"
            " (child_run_id, parent_run_id, reply_to, correlation_id, chain, depth)"
            " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (child_run_id) DO NOTHING",
            d.child_run_id,
            d.parent_run_id,
            d.reply_to,
            d.correlation_id,
            list(d.chain),
            d.depth,
        )

    async def delegation(self, child_run_id: str) -> Delegation | None:
        row = await self.pool.fetchrow(
            f"SELECT * FROM {self.s}.delegations WHERE child_run_id = $1", child_run_id
        )
        if row is None:
            return None
        return Delegation(
            row["child_run_id"],
            row["parent_run_id"],
            row["reply_to"],
            row["correlation_id"],
            tuple(row["chain"]),
            row["depth"] if row["depth"] is not None else len(row["chain"]),
        )
