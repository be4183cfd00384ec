"""Hybrid search: vector (pgvector HNSW) + lexical (tsvector GIN), fused, then weighted.

One SQL round trip asks both retrievers for their best `candidates` in the requested scopes,
and the details of the union. Fusion is weighted reciprocal-rank fusion: ``1/(k + rank)`` of
the vector rank plus ``coverage**p/(k + rank)`` of the lexical rank, where coverage is the
share of the query's words the memory holds. Plain RRF let a memory holding one common word
of a paraphrase outrank the vector retriever's first (a weak word match at lexical rank 1
added 1/(k+1) to a middling vector rank); weighted by coverage, a partial match counts
little and a match of every word fully. A memory that holds the query's identifiers
(`identifiers`: ERR_CONN_RESET, PAY-1432) exactly gets `Weights.identifier` added, so it
ranks above near misses that both retrievers find almost as close. The fused score is then
weighted by recency (half-life), by how often searches returned the item before
(logarithmic) and by kind; a superseded or stale item (non-strict search only) weighs half.
Each item carries `why`: its ranks, similarity and weights (`fused` includes the identifier
bonus). Measured per query class in bench/bench_memory.py, docs/performance.md.

`rank` is pure: it turns retriever rows into scored items, so the ranking is testable without
a database.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from nexus_events.events import MemoryItem, MemoryMatch, MemorySearchRequest
from nexus_events.transport.projection import quote_ident

from nexus_memory.embedding import Embedder
from nexus_memory.identifiers import held, identifiers
from nexus_memory.lexicon import CommonWords
from nexus_memory.projection import MEMORY_SCHEMA

DAY = 86400.0
# Most rows matching any word of the query that the lexical retriever ranks: enough to hold
# the relevant matches of a specific word in a scope, small enough that the heap reads cost
# a few milliseconds whatever the table's size (1,000 read ~1,000 pages per search at 100k;
# a partial match counts only coverage² in the fusion, so fewer are needed).
ANY_WORD_POOL = 200


@dataclass(frozen=True, slots=True)
class Weights:
    rrf_k: int = 5
    # A lexical rank counts coverage**power of itself (coverage: share of the query's words
    # the memory holds). 2: the smallest power at which hybrid ties vector-only on the tuning
    # corpus's paraphrases (bench/ranking_corpora.py); 0 is plain RRF.
    coverage_power: float = 2.0
    # Added to the fused score per share of the query's identifiers held exactly: more than
    # any fused score (at most 2/(k+1)), so an exact identifier ranks first.
    identifier: float = 1.0
    half_life_days: float = 30.0
    kinds: Mapping[str, float] | None = None
    access: float = 0.1  # per natural-log unit of access count
    not_current: float = 0.5


@dataclass(frozen=True, slots=True)
class Row:
    """One candidate as the SQL returns it."""

    memory_id: str
    scope: str
    kind: str
    text: str
    source_run_id: str | None
    recorded_at: datetime
    access_count: int
    current: bool
    semantic_rank: int | None
    similarity: float | None
    lexical_rank: int | None
    coverage: float | None = None  # share of the query's words it holds (lexical candidates)


def rank(
    rows: Sequence[Row],
    now: datetime,
    limit: int,
    w: Weights,
    identifiers_: Sequence[str] = (),
) -> list[MemoryItem]:
    """Score, sort (score, then newest, then id: deterministic) and cut to `limit`."""
    scored: list[tuple[float, Row, MemoryMatch]] = []
    for r in rows:
        fused = 0.0
        if r.semantic_rank:
            fused += 1.0 / (w.rrf_k + r.semantic_rank)
        if r.lexical_rank:
            coverage = 1.0 if r.coverage is None else r.coverage
            fused += coverage**w.coverage_power / (w.rrf_k + r.lexical_rank)
        if identifiers_ and w.identifier:
            fused += w.identifier * held(identifiers_, r.text)
        age_days = max((now - r.recorded_at).total_seconds(), 0.0) / DAY
        recency = 0.5 ** (age_days / w.half_life_days)
        kind_weight = (w.kinds or {}).get(r.kind, 1.0)
        score = (
            fused
            * (0.5 + 0.5 * recency)
            * (1.0 + w.access * math.log1p(r.access_count))
            * kind_weight
            * (1.0 if r.current else w.not_current)
        )
        why = MemoryMatch(
            semantic_rank=r.semantic_rank,
            similarity=None if r.similarity is None else round(r.similarity, 4),
            lexical_rank=r.lexical_rank,
            fused=round(fused, 6),
            recency=round(recency, 4),
            access_count=r.access_count,
            kind_weight=kind_weight,
        )
        scored.append((score, r, why))
    scored.sort(key=lambda t: (-t[0], -t[1].recorded_at.timestamp(), t[1].memory_id))
    return [
        MemoryItem(
            memory_id=r.memory_id,
            text=r.text,
            score=round(score, 6),
            source_run_id=r.source_run_id,
            scope=r.scope,
            kind=r.kind,
            current=r.current,
            why=why,
        )
        for score, r, why in scored[:limit]
    ]


def _sql(q: str) -> str:
    # $1 query vector, $2 query text, $3 scopes, $4 strict, $5 kinds, $6 candidates,
    # $7 most "any word" matches ranked, $8 the query's identifiers, $9 lexemes too common
    # for the any-word tier (lexicon.py)
    where = (
        "scope = ANY($3::text[]) AND NOT forgotten"
        " AND (NOT $4::bool OR (valid_to IS NULL AND NOT stale))"
        " AND (cardinality($5::text[]) = 0 OR kind = ANY($5::text[]))"
    )
    return f"""
WITH sem AS (
    SELECT memory_id, sim, row_number() OVER (ORDER BY sim DESC, memory_id) AS r
    FROM (SELECT memory_id, 1 - (embedding <=> $1) AS sim
          FROM {q}.memories WHERE {where}
          ORDER BY embedding <=> $1 LIMIT $6) s
),
query AS (
    SELECT plainto_tsquery('english', $2) AS every_word,
           replace(plainto_tsquery('english', $2)::text, '&', '|')::tsquery AS any_word,
           tsvector_to_array(to_tsvector('english', $2)) AS words,
           rare.any_word AS rare_word, rare.every_word AS rare_words,
           (SELECT string_agg('(' || p::text || ')', ' & ')
            FROM unnest($8::text[]) t, phraseto_tsquery('english', t) p
            WHERE p::text <> '')::tsquery AS ident
    FROM (SELECT string_agg(quote_literal(w), ' | ')::tsquery AS any_word,
                 string_agg(quote_literal(w), ' & ')::tsquery AS every_word
          FROM unnest(tsvector_to_array(to_tsvector('english', $2))) w
          -- (quote_literal writes E'...' for a backslash, which tsquery cannot read)
          WHERE w <> ALL($9::text[]) AND strpos(w, chr(92)) = 0) rare
),
-- Memories holding the query's identifiers as phrases (ERR_CONN_RESET: err <-> conn <-> reset),
-- so an exact identifier is a candidate even when the query's other words are common.
ident AS (
    SELECT memory_id, ts_rank(tsv, ident, 1) AS rk, 0 AS tier
    FROM {q}.memories, query
    WHERE tsv @@ ident AND {where}
      AND (SELECT ident FROM query) IS NOT NULL  -- one-time filter: no scan without any
    ORDER BY rk DESC LIMIT $6
),
-- Lexical candidates: memories with every word of the query first (selective, so the GIN
-- index answers it), then, if those are fewer than wanted, memories with any of its words.
-- "Any word" leaves out the table's most common words (a bitmap of much of the table, for
-- little evidence) and ranks only the first $7 matches, so its cost is bounded by that, not
-- by the table (an unbounded ranking scanned 100k rows per search).
all_words AS (
    SELECT memory_id, ts_rank(tsv, every_word, 1) AS rk, 1 AS tier
    -- The index is asked for the query's rarer words (short posting lists) when it has
    -- any; every word is then checked on those rows only (IS TRUE: not an index condition).
    -- Like "any word", only the first $7 matches are ranked: a query of common words only
    -- ("how do I run the tests") matches thousands of rows, and ranking them all was the
    -- slowest search at 100k memories, for evidence fusion weighs little.
    FROM (SELECT memory_id, tsv FROM {q}.memories, query
          WHERE tsv @@ coalesce(rare_words, every_word) AND (tsv @@ every_word) IS TRUE
            AND {where} LIMIT $7) pool, query
    ORDER BY rk DESC LIMIT $6
),
any_words AS (
    SELECT memory_id, ts_rank(tsv, any_word, 1) AS rk, 2 AS tier
    FROM (SELECT memory_id, tsv FROM {q}.memories, query
          WHERE tsv @@ rare_word AND {where} LIMIT $7) pool, query
    -- Only when the every-word tier left room and a word is left (one-time filters:
    -- otherwise never scanned).
    WHERE (SELECT count(*) FROM all_words) < $6
      AND (SELECT rare_word FROM query) IS NOT NULL
    ORDER BY rk DESC LIMIT $6
),
lex AS (
    SELECT memory_id, row_number() OVER (ORDER BY tier, rk DESC, memory_id) AS r
    FROM (SELECT DISTINCT ON (memory_id) memory_id, tier, rk
          FROM (SELECT * FROM ident UNION ALL SELECT * FROM all_words
                UNION ALL SELECT * FROM any_words) c
          ORDER BY memory_id, tier) best
    ORDER BY tier, rk DESC, memory_id LIMIT $6
)
SELECT m.memory_id, m.scope, m.kind, m.text, m.source_run_id, m.recorded_at, m.access_count,
       (m.valid_to IS NULL AND NOT m.stale) AS current,
       sem.r AS semantic_rank, sem.sim AS similarity, lex.r AS lexical_rank,
       -- query words it holds (ts_delete drops them) over the query's words
       (length(m.tsv) - length(ts_delete(m.tsv, query.words)))::float8
           / greatest(cardinality(query.words), 1) AS coverage
FROM {q}.memories m CROSS JOIN query
JOIN (SELECT memory_id FROM sem UNION SELECT memory_id FROM lex) u USING (memory_id)
LEFT JOIN sem USING (memory_id)
LEFT JOIN lex USING (memory_id)
"""


class MemorySearch:
    """Runs a `MemorySearchRequest` against the live tables."""

    def __init__(
        self,
        pool: asyncpg.Pool[Any],
        embedder: Embedder,
        weights: Weights,
        *,
        candidates: int = 50,
        schema: str = MEMORY_SCHEMA,
    ) -> None:
        self.pool = pool
        self.embedder = embedder
        self.weights = weights
        self.candidates = candidates
        self.sql = _sql(quote_ident(schema))
        self.common_words = CommonWords(pool, schema)

    async def arguments(self, request: MemorySearchRequest) -> tuple[Any, ...]:
        """The parameters of `sql` for `request` (in its $n order)."""
        return (
            (await self.embedder.embed([request.query]))[0],
            request.query,
            request.scopes,
            request.strict,
            request.kinds,
            max(self.candidates, request.limit),
            ANY_WORD_POOL,
            identifiers(request.query),
            await self.common_words.get(),
        )

    async def fetch_candidates(self, request: MemorySearchRequest) -> list[Row]:
        """Both retrievers' candidates for `request`, unranked (what `rank` fuses)."""
        records = await self.pool.fetch(self.sql, *await self.arguments(request))
        return [Row(**dict(r)) for r in records]

    async def search(self, request: MemorySearchRequest, now: datetime) -> list[MemoryItem]:
        rows = await self.fetch_candidates(request)
        return rank(rows, now, request.limit, self.weights, identifiers(request.query))
