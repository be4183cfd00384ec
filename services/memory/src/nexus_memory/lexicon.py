"""The lexemes so common in the memory table that "holds any of the query's words" is no
evidence, read from PostgreSQL's own statistics.

The any-word tier of the lexical retriever asks the GIN index for every memory holding any
of the query's words. For a word that a fifth of the table holds the index builds a bitmap
of 20k rows at 100k memories (~14 ms, most of a search's cost) to rank a match that fusion
then weighs by coverage² anyway. ANALYZE (autovacuum) already counts the most common
lexemes of the tsvector column (``pg_stats.most_common_elems`` with their frequencies), so
those above `SHARE` are left out of that tier; the every-word and identifier tiers and the
coverage keep them. Below `FROM_ROWS` memories nothing is left out: the scan is cheap there,
and results do not depend on when autovacuum last ran.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg

SHARE = 0.01  # a lexeme held by more than 1% of memories
FROM_ROWS = 5_000  # estimated rows (pg_class.reltuples) before any is left out
REFRESH = 60.0  # seconds between reads of the statistics

_STATS = """
SELECT c.reltuples, s.most_common_elems::text::text[] AS elems,
       s.most_common_elem_freqs AS freqs
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname
                     AND s.attname = 'tsv'
WHERE n.nspname = $1 AND c.relname = 'memories'
"""


def common(elems: list[str] | None, freqs: list[float] | None, rows: float) -> list[str]:
    """Lexemes held by more than SHARE of the rows, when there are FROM_ROWS or more.
    (`freqs` has one frequency per lexeme, then their minimum, maximum and null share.)"""
    if rows < FROM_ROWS or not elems or not freqs:
        return []
    return [e for e, f in zip(elems, freqs[: len(elems)], strict=True) if f > SHARE]


class CommonWords:
    """`common()` of the live table, re-read at most every REFRESH seconds."""

    def __init__(self, pool: asyncpg.Pool[Any], schema: str) -> None:
        self.pool = pool
        self.schema = schema
        self._words: list[str] = []
        self._until = 0.0

    def expire(self) -> None:
        """Read the statistics again at the next search (after a bulk load and ANALYZE)."""
        self._until = 0.0

    async def get(self) -> list[str]:
        if time.monotonic() >= self._until:
            row = await self.pool.fetchrow(_STATS, self.schema)
            self._words = [] if row is None else common(row["elems"], row["freqs"], row[0])
            self._until = time.monotonic() + REFRESH
        return self._words
