"""What every table group of the gateway's store shares: the pool and the quoted schema name."""

from __future__ import annotations

from typing import Any

import asyncpg


class TableGroup:
    """Base of the table-group mixins that `GatewayStore` combines; each group reads and writes
    its own tables of the schema `s` (quoted) through `pool`."""

    pool: asyncpg.Pool[Any]
    s: str
