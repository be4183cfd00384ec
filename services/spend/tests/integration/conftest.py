"""Fixtures of the spend service's integration tests: its tables on a fresh database, a
manual clock and the reservations on them."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus

from nexus_spend.reservations import Reservations

from .harness import AT, create_tables


@pytest.fixture
async def db(pg_pool: asyncpg.Pool[Any]) -> asyncpg.Pool[Any]:
    await create_tables(pg_pool)
    return pg_pool


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(AT)


@pytest.fixture
def res(db: asyncpg.Pool[Any], bus: Bus, clock: ManualClock) -> Reservations:
    return Reservations(db, bus, clock)
