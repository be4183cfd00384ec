"""Memory: search quality, ingest, and search latency at 10k and 100k memories.

One `MemoryApp` (the real service: projection, guard, `nexus-memory` endpoints) on the run's
nats-server and PostgreSQL, with the WordLlama embedder. In order:

1. Quality: the judged corpus of `bench.memory_corpus` recorded through MEMORY_RECORD into
   a scope of its own; recall@10 and nDCG@10 of hybrid search (the service, over NATS) against
   vector-only and lexical-only, which are the service's own SQL and `search.rank` with the
   other retriever's ranks removed (same candidates, same fusion and weights). Measured as
   recorded, then again after the service's own consolidation pass; with a diagnosis of what
   hybrid lost, and of `rank` with other RRF constants on the same candidates.
2. Ranking per query class: the labelled corpora of `bench.ranking_corpora` (a tuning set
   the fusion's constants were chosen on, and a held-out set they never saw), each recorded
   into a scope of its own; recall@1 and MRR per class (paraphrase, keyword, identifier) of
   vector-only, lexical-only and hybrid, and whether every exact identifier ranks first.
3. Ingest: 10,000 memories through MEMORY_RECORD requests (guard, publish), timed until the
   projection's checkpoint reaches the last one (embed, guard, insert, HNSW + GIN upkeep),
   against WordLlama embedding the same texts alone and hand-written asyncpg inserting the
   same rows into a table of the same shape.
4. Search latency at 10k: request -> reply over NATS, and the same search in-process, against
   raw asyncpg queries on the same table (pgvector-only ``ORDER BY embedding <=> $1 LIMIT 10``,
   tsvector-only), with `EXPLAIN` of whether the plans name the HNSW / GIN indexes.
5. The other 90,000 memories embedded and COPYed into the service's table (bounded: the
   projection's per-row path is measured by step 3), then latency at 100k.

Access counting is set to flush once an hour, so the searches of the benchmark do not change
the ranking of the ones after them. `NEXUS_BENCH_MEMORY_SCALE` (default 1) scales the
latency table sizes for a quick look. Alone: ``python -m bench memory``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.streams import MEMORY, ensure_streams
from nexus_events.events import MemorySearchRequest
from nexus_events.events.memory import parse_scope
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.projection import Conn
from nexus_memory.app import MemoryApp
from nexus_memory.config import MemorySettings
from nexus_memory.embedding import WordLlamaEmbedder
from nexus_memory.projection import content_hash
from nexus_memory.search import MemorySearch, Row, Weights, rank
from pgvector.asyncpg import register_vector

from bench.memory_corpus import (
    FACTS,
    QUERIES,
    distractors,
    latency_queries,
    load_texts,
    ndcg_at,
    recall_at,
)
from bench.ranking_corpora import (
    CLASSES,
    HELD_OUT,
    TUNING,
    Corpus,
    Scores,
    evaluate,
    shortfalls,
    single_retriever,
)

SCALE = float(os.environ.get("NEXUS_BENCH_MEMORY_SCALE", "1"))
SMALL = int(10_000 * SCALE)  # recorded through the service
LARGE = int(100_000 * SCALE)  # the rest published as events
DISTRACTORS = 1_500
SEARCHES = 400
MIN_SEARCHES = 100
BUDGET = 10.0  # seconds of searches per path and table size
IN_FLIGHT = 64
K = 10
# Scope tokens, as the service stores them (``repo:bench`` is ``repo-bench``).
SCOPE = parse_scope("repo:bench")
SEARCH_SCOPES = [SCOPE, parse_scope("agent:bench"), "global"]  # as core's assembly asks
QUALITY_SCOPE = parse_scope("repo:quality")
TABLE = "memory.memories"

RAW_VECTOR = f"SELECT memory_id FROM {TABLE} ORDER BY embedding <=> $1 LIMIT {K}"
RAW_LEXICAL = (
    f"SELECT memory_id FROM {TABLE}, plainto_tsquery('english', $1) q"
    f" WHERE tsv @@ q ORDER BY ts_rank(tsv, q) DESC LIMIT {K}"
)
# The service's lexical arm ORs the query's words (search.py); the raw form of that.
RAW_LEXICAL_OR = (
    f"SELECT memory_id FROM {TABLE},"
    " (SELECT replace(plainto_tsquery('english', $1)::text, '&', '|')::tsquery AS q) x"
    f" WHERE tsv @@ q ORDER BY ts_rank(tsv, q) DESC LIMIT {K}"
)

Rows = list[tuple[str, float, str, float]]


def _note(text: str) -> None:
    print(f"  | {text}", flush=True)


def _percentiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49], q[98]


async def _latencies(
    call: Callable[[str], Awaitable[object]], queries: Sequence[str]
) -> list[float]:
    """Sequential calls, one per query, after 20 warm-up ones; stops early (with at least
    MIN_SEARCHES samples) once BUDGET seconds are spent, so slow paths keep the run short."""
    for q in queries[:20]:  # warm: prepared statements, caches, index pages
        await call(q)
    samples = []
    started = time.perf_counter()
    for q in queries:
        t0 = time.perf_counter()
        await call(q)
        samples.append((time.perf_counter() - t0) * 1000)
        if len(samples) >= MIN_SEARCHES and time.perf_counter() - started > BUDGET:
            break
    return samples


async def _ask(bus: Bus, subject: str, body: dict[str, Any]) -> Any:
    reply = await bus.nc.request(subject, json.dumps(body).encode(), timeout=60)
    return json.loads(reply.data)


async def _record_all(bus: Bus, items: Sequence[tuple[str, str]], scope: str) -> None:
    """MEMORY_RECORD requests, IN_FLIGHT at a time, as clients (tools, the CLI) send them."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(memory_id: str, text: str) -> None:
        async with gate:
            body = {"text": text, "scope": scope, "memory_id": memory_id}
            reply = await _ask(bus, subjects.MEMORY_RECORD, body)
            assert reply.get("memory_id") == memory_id, reply

    await asyncio.gather(*(one(m, t) for m, t in items))


async def _applied(app: MemoryApp) -> None:
    """Until the projection's checkpoint reaches what NEXUS_MEMORY holds now."""
    assert app.runner is not None
    last = (await app.bus.js.stream_info(MEMORY)).state.last_seq
    await app.runner.wait_until(MEMORY, last, within=900)


# -- quality --------------------------------------------------------------------------------


async def _candidates(search: MemorySearch, query: str, scopes: list[str]) -> list[Row]:
    """What the service's SQL gives `rank` for `query`."""
    return await search.fetch_candidates(MemorySearchRequest(query=query, scopes=scopes, limit=K))


@dataclass
class _Losses:
    """Relevant memories one retriever alone ranked in its top 10 but hybrid did not."""

    lost: int = 0
    queries: int = 0
    other_missing: int = 0  # absent from the other retriever's candidates
    other_far: int = 0  # ranked below 20 by the other retriever
    above_both: int = 0  # hybrid places in those queries held by irrelevant both-found items

    def note(self) -> str:
        return (
            f"hybrid dropped {self.lost} relevant memories (in {self.queries} queries) that one"
            f" retriever alone ranked in its top {K}: {self.other_missing} were not among the"
            f" other retriever's candidates, {self.other_far} ranked below 20 there; in those"
            f" queries {self.above_both} of the {K * self.queries} hybrid places went to"
            " irrelevant memories found by both retrievers (reciprocal ranks add up: two"
            " middling ranks outscore one first place)"
        )


RRF_PROBES = (60, 20, 10, 5, 2, 1)  # NEXUS_MEMORY_RRF_K values tried on the same candidates


def _cross_validated(probes: dict[int, list[float]]) -> tuple[float, list[int]]:
    """nDCG@10 of hybrid with the RRF constant chosen without seeing the queries it is
    scored on: 2-fold (even / odd queries), k picked on one fold, scored on the other."""
    n = len(next(iter(probes.values())))
    folds = [list(range(0, n, 2)), list(range(1, n, 2))]
    scores: list[float] = []
    chosen: list[int] = []
    for fold, other in ((folds[0], folds[1]), (folds[1], folds[0])):
        best = max(probes, key=lambda k: statistics.fmean(probes[k][i] for i in other))
        chosen.append(best)
        scores += [probes[best][i] for i in fold]
    return statistics.fmean(scores), chosen


async def _evaluate(
    app: MemoryApp, search: MemorySearch
) -> tuple[dict[str, tuple[float, float]], _Losses]:
    scores: dict[str, list[tuple[float, float]]] = {"hybrid": [], "vector": [], "lexical": []}
    probes: dict[int, list[float]] = {k: [] for k in RRF_PROBES}
    same = 0
    losses = _Losses()
    for query, grades in QUERIES:
        body = {"query": query, "scopes": [QUALITY_SCOPE], "limit": K, "strict": True}
        reply = await _ask(app.bus, subjects.MEMORY_SEARCH, body)
        rows = await _candidates(search, query, [QUALITY_SCOPE])
        ranked = {
            "hybrid": [i["memory_id"] for i in reply["items"]],
            "vector": single_retriever(rows, "vector", search.weights, K),
            "lexical": single_retriever(rows, "lexical", search.weights, K),
        }
        for name, ids in ranked.items():
            scores[name].append((recall_at(ids, grades, K), ndcg_at(ids, grades, K)))
        now = datetime.now(UTC)
        for k in RRF_PROBES:
            ids = [i.memory_id for i in rank(rows, now, K, replace(search.weights, rrf_k=k))]
            probes[k].append(ndcg_at(ids, grades, K))
            if k == search.weights.rrf_k:
                same += ids == ranked["hybrid"]
        by_id = {r.memory_id: r for r in rows}
        single = set(ranked["vector"]) | set(ranked["lexical"])
        lost = [m for m, g in grades.items() if g and m in single and m not in ranked["hybrid"]]
        for m in lost:
            r = by_id[m]
            other = r.lexical_rank if m in ranked["vector"] else r.semantic_rank
            losses.other_missing += other is None
            losses.other_far += other is not None and other > 20
        if lost:
            losses.lost += len(lost)
            losses.queries += 1
            losses.above_both += sum(
                1
                for i in reply["items"]
                if not grades.get(i["memory_id"])
                and i["why"]["semantic_rank"] is not None
                and i["why"]["lexical_rank"] is not None
            )
    mean: dict[str, tuple[float, float]] = {}
    for name, pairs in scores.items():
        mean[name] = (statistics.fmean(p[0] for p in pairs), statistics.fmean(p[1] for p in pairs))
        kw = [p[1] for (q, _), p in zip(QUERIES, pairs, strict=True) if q in _KEYWORD_QUERIES]
        para = [p[1] for (q, _), p in zip(QUERIES, pairs, strict=True) if q not in _KEYWORD_QUERIES]
        _note(
            f"  {name:<8} recall@10 {mean[name][0]:.3f}  nDCG@10 {mean[name][1]:.3f}"
            f"  (nDCG keyword-like {statistics.fmean(kw):.3f}, paraphrases"
            f" {statistics.fmean(para):.3f})"
        )
    _note("  " + losses.note())
    _note(
        "  hybrid nDCG@10 by rrf_k, rank() on the same candidates: "
        + ", ".join(f"k={k} {statistics.fmean(v):.3f}" for k, v in probes.items())
        + f" (k={search.weights.rrf_k} in-process equals the service's reply in {same} of"
        f" {len(QUERIES)} queries)"
    )
    cv, chosen = _cross_validated(probes)
    _note(
        f"  hybrid nDCG@10 with rrf_k chosen by 2-fold cross-validation: {cv:.3f}"
        f" (k chosen per fold: {chosen[0]}, {chosen[1]})"
    )
    return mean, losses


async def _quality(app: MemoryApp, search: MemorySearch) -> Rows:
    items = list(FACTS.items()) + [
        (f"q-d{i:05d}", t) for i, t in enumerate(distractors(DISTRACTORS))
    ]
    await _record_all(app.bus, items, QUALITY_SCOPE)
    await _applied(app)
    keyword = len(_KEYWORD_QUERIES)
    _note(
        f"quality: {len(FACTS)} judged + {DISTRACTORS} distractor memories recorded through"
        f" MEMORY_RECORD, {len(QUERIES)} queries ({keyword} keyword-like, the rest"
        " paraphrases); hybrid = the service over NATS, the others = its SQL and rank() with"
        " one retriever's ranks removed"
    )
    _note("as recorded:")
    mean, _ = await _evaluate(app, search)
    # What a live service holds an hour later: its consolidation pass merges the distractors'
    # exact and near duplicates (superseded, so hidden from strict search).
    reply = await _ask(app.bus, subjects.MEMORY_CONSOLIDATE, {"scopes": [QUALITY_SCOPE]})
    await _applied(app)
    facts_left = await app.pool.fetchval(
        f"SELECT count(*) FROM {TABLE} WHERE memory_id = ANY($1::text[]) AND valid_to IS NULL",
        list(FACTS),
    )
    _note(
        f"after the service's consolidation pass ({reply.get('superseded')} superseded,"
        f" {facts_left} of {len(FACTS)} judged memories still current):"
    )
    after, _ = await _evaluate(app, search)
    h, v, lx = mean["hybrid"], mean["vector"], mean["lexical"]
    ch, cv, cl = after["hybrid"], after["vector"], after["lexical"]
    return [
        ("vector-only recall@10", v[0], "", 0.0),
        ("lexical-only recall@10", lx[0], "", 0.0),
        ("hybrid recall@10 (vs vector-only)", h[0], "vector-only", h[0] / v[0]),
        ("hybrid recall@10 (vs lexical-only)", h[0], "lexical-only", h[0] / lx[0]),
        ("vector-only nDCG@10", v[1], "", 0.0),
        ("lexical-only nDCG@10", lx[1], "", 0.0),
        ("hybrid nDCG@10 (vs vector-only)", h[1], "vector-only", h[1] / v[1]),
        ("hybrid nDCG@10 (vs lexical-only)", h[1], "lexical-only", h[1] / lx[1]),
        ("consolidated: vector-only nDCG@10", cv[1], "", 0.0),
        ("consolidated: lexical-only nDCG@10", cl[1], "", 0.0),
        ("consolidated: hybrid nDCG@10 (vs vector-only)", ch[1], "vector-only", ch[1] / cv[1]),
        ("consolidated: hybrid nDCG@10 (vs lexical-only)", ch[1], "lexical-only", ch[1] / cl[1]),
    ]


_KEYWORD_QUERIES = {q for q, _ in QUERIES[:15]}  # memory_corpus lists them first


# -- ranking per query class --------------------------------------------------------------


async def _classes(app: MemoryApp, search: MemorySearch) -> Rows:
    rows: Rows = []
    for corpus in (TUNING, HELD_OUT):
        scope = parse_scope(f"repo:rank-{corpus.name}")
        await _record_all(app.bus, list(corpus.memories.items()), scope)
        await _applied(app)
        rows += await _judge(app, search, corpus, scope)
    return rows


async def _judge(
    app: MemoryApp, search: MemorySearch, corpus: Corpus, scope: str, at: str = ""
) -> Rows:
    async def hybrid(query: str) -> list[str]:
        body = {"query": query, "scopes": [scope], "limit": K, "strict": True}
        return [
            i["memory_id"] for i in (await _ask(app.bus, subjects.MEMORY_SEARCH, body))["items"]
        ]

    scores: Scores = await evaluate(corpus, search, scope, hybrid, K)
    role = "tuning" if corpus is TUNING else "held out"
    counts = {c: sum(q.kind == c for q in corpus.queries) for c in CLASSES}
    _note(
        f"ranking, {corpus.name} ({role}){at}: {len(corpus.memories)} memories, queries "
        + ", ".join(f"{n} {c}" for c, n in counts.items())
        + "; recall@1 / MRR@10"
    )
    for c in CLASSES:
        _note(
            f"  {c:<10} "
            + "  ".join(
                f"{m} {scores[m][c].recall_at_1:.2f} / {scores[m][c].mrr:.3f}" for m in scores
            )
        )
    firsts = 0
    identifier_queries = [q for q in corpus.queries if q.kind == "identifier"]
    for q in identifier_queries:
        firsts += (await hybrid(q.text))[:1] == [q.target]
    short = shortfalls(scores)
    _note(
        f"  exact identifier first in {firsts} of {len(identifier_queries)};"
        f" hybrid >= the better single retriever in every class: {'yes' if not short else 'NO'}"
        + (f" ({'; '.join(short)})" if short else "")
    )
    out: Rows = []
    for c in CLASSES:
        best = max(("vector", "lexical"), key=lambda m: scores[m][c].key())
        h, b = scores["hybrid"][c].mrr, scores[best][c].mrr
        out.append(
            (f"{corpus.name}{at} {c} hybrid MRR@10", h, f"{best}-only {b:.3f}", h / b if b else 0.0)
        )
    return out


# -- ingest ---------------------------------------------------------------------------------


async def _ingest(
    app: MemoryApp, raw: asyncpg.Pool[Any], embedder: WordLlamaEmbedder, texts: list[str]
) -> Rows:
    # Baseline: the embedder alone on the same texts, in the projection's batch size.
    batch = app.settings.projection_batch
    t0 = time.perf_counter()
    for start in range(0, len(texts), batch):
        await embedder.embed(texts[start : start + batch])
    embed_rate = len(texts) / (time.perf_counter() - t0)
    items = [(f"b-{i:07d}", t) for i, t in enumerate(texts)]
    t0 = time.perf_counter()
    await _record_all(app.bus, items, SCOPE)
    replied = time.perf_counter() - t0
    await _applied(app)
    rate = len(texts) / (time.perf_counter() - t0)
    _note(
        f"ingest: {len(texts):,} MEMORY_RECORD requests ({IN_FLIGHT} in flight) all replied in"
        f" {replied:.1f} s; projected (checkpoint at the last event) after"
        f" {len(texts) / rate:.1f} s"
    )
    insert_rate = await _raw_insert(raw, embedder, texts, batch)
    return [
        ("WordLlama embed of the same texts (texts/s)", embed_rate, "", 1.0),
        ("raw asyncpg insert, same rows + indexes (rows/s)", insert_rate, "", 1.0),
        ("record over NATS -> projected (memories/s)", rate, "embed alone", rate / embed_rate),
        ("record over NATS -> projected (memories/s)", rate, "raw insert", rate / insert_rate),
    ]


async def _raw_insert(
    raw: asyncpg.Pool[Any], embedder: WordLlamaEmbedder, texts: list[str], batch: int
) -> float:
    """Rows/s of hand-written asyncpg executemany (a transaction per projection batch) of the
    same rows, vectors computed beforehand, into an empty table shaped like the service's
    (same columns, HNSW, GIN and btree indexes): what PostgreSQL alone costs."""
    vectors = await embedder.embed(texts)
    now = datetime.now(UTC)
    rows: list[tuple[Any, ...]] = [
        (f"raw-{i}", SCOPE, "fact", t, [], None, "manual", None, False, content_hash(t), v, now, i)
        for i, (t, v) in enumerate(zip(texts, vectors, strict=True))
    ]
    async with raw.acquire() as conn:
        await conn.execute(
            f"CREATE SCHEMA bench_raw; CREATE TABLE bench_raw.memories (LIKE {TABLE} INCLUDING ALL)"
        )
        t0 = time.perf_counter()
        for start in range(0, len(rows), batch):
            async with conn.transaction():
                await conn.execute("SET LOCAL synchronous_commit = off")  # as projections do
                await conn.executemany(
                    "INSERT INTO bench_raw.memories (memory_id, scope, kind, text, tags, key,"
                    " source, source_run_id, redacted, content_hash, embedding, recorded_at, seq)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                    rows[start : start + batch],
                )
        rate = len(rows) / (time.perf_counter() - t0)
        await conn.execute("DROP SCHEMA bench_raw CASCADE")
    return rate


async def _copy_rest(raw: asyncpg.Pool[Any], embedder: WordLlamaEmbedder, texts: list[str]) -> Rows:
    """The rest of the table, embedded and COPYed straight into the service's table with the
    HNSW index rebuilt after (the service's own write path is what the ingest step measures;
    row by row to 100k took minutes on 2 cores)."""
    t0 = time.perf_counter()
    vectors = await embedder.embed(texts)
    now = datetime.now(UTC)
    records = [
        (f"b-{SMALL + i:07d}", SCOPE, "fact", t, "manual", content_hash(t), v, now, -1 - i)
        for i, (t, v) in enumerate(zip(texts, vectors, strict=True))
    ]
    async with raw.acquire() as conn:
        await conn.execute("DROP INDEX memory.memories_embedding")
        await conn.copy_records_to_table(
            "memories",
            schema_name="memory",
            columns=[
                "memory_id", "scope", "kind", "text", "source", "content_hash", "embedding",
                "recorded_at", "seq",
            ],
            records=records,
        )  # fmt: skip
        await conn.execute("SET maintenance_work_mem = '512MB'")
        await conn.execute(
            "CREATE INDEX memories_embedding ON memory.memories"
            " USING hnsw (embedding vector_cosine_ops)"
        )  # as projection.py creates it
    elapsed = time.perf_counter() - t0
    _note(
        f"load: {len(texts):,} more memories embedded and COPYed into {TABLE}, HNSW index"
        f" rebuilt, in {elapsed:.1f} s"
    )
    return [("embed + COPY + HNSW build to 100k (memories/s)", len(texts) / elapsed, "", 0.0)]


# -- latency --------------------------------------------------------------------------------


async def _explain(conn: Conn, sql: str, *args: object) -> str:
    rows = await conn.fetch("EXPLAIN (COSTS OFF) " + sql, *args)
    return "\n".join(r[0] for r in rows)


async def _latency(
    app: MemoryApp, search: MemorySearch, raw: asyncpg.Pool[Any], label: str
) -> Rows:
    await raw.execute(f"ANALYZE {TABLE}")  # as autovacuum would after a load
    for common in (search.common_words, app.search.common_words if app.search else None):
        if common is not None:
            common.expire()  # the new statistics at the next search (a minute otherwise)
    count = await raw.fetchval(f"SELECT count(*) FROM {TABLE}")
    queries = latency_queries(SEARCHES)
    vectors = {q: (await search.embedder.embed([q]))[0] for q in set(queries)}

    async def nats_search(q: str) -> None:
        body = {"query": q, "scopes": SEARCH_SCOPES, "limit": K}
        reply = await app.bus.nc.request(subjects.MEMORY_SEARCH, json.dumps(body).encode(), 10)
        assert b'"items"' in reply.data, reply.data

    async def in_process(q: str) -> None:
        request = MemorySearchRequest(query=q, scopes=SEARCH_SCOPES, limit=K)
        await search.search(request, datetime.now(UTC))

    async def raw_vector(q: str) -> None:
        await raw.fetch(RAW_VECTOR, vectors[q])

    async def raw_lexical(q: str) -> None:
        await raw.fetch(RAW_LEXICAL, q)

    async def raw_lexical_or(q: str) -> None:
        await raw.fetch(RAW_LEXICAL_OR, q)

    async def embed(q: str) -> None:
        await search.embedder.embed([q])

    results: dict[str, tuple[float, float]] = {}
    counts: dict[str, int] = {}
    for name, call in (
        ("raw vector", raw_vector),
        ("raw lexical", raw_lexical),
        ("raw lexical or", raw_lexical_or),
        ("embed", embed),
        ("in-process", in_process),
        ("nats", nats_search),
    ):
        samples = await _latencies(call, queries)
        results[name], counts[name] = _percentiles(samples), len(samples)

    probe = queries[1]
    async with app.pool.acquire() as conn:  # the service's session settings (iterative scan)
        request = MemorySearchRequest(query=probe, scopes=SEARCH_SCOPES, limit=K)
        hybrid_plan = await _explain(conn, search.sql, *await search.arguments(request))
        raw_plan = await _explain(conn, RAW_VECTOR, vectors[probe])
    _note(
        f"{label}: {count:,} rows; sequential searches (scopes {', '.join(SEARCH_SCOPES)};"
        f" limit {K}; {search.candidates} candidates per retriever); samples per path: "
        + ", ".join(f"{k} {n}" for k, n in counts.items())
    )
    _note(
        f"EXPLAIN raw vector query names the HNSW index (memories_embedding):"
        f" {'yes' if 'memories_embedding' in raw_plan else 'NO'}"
    )
    _note(
        "EXPLAIN service hybrid query names HNSW (memories_embedding):"
        f" {'yes' if 'memories_embedding' in hybrid_plan else 'NO'}, GIN (memories_tsv):"
        f" {'yes' if 'memories_tsv' in hybrid_plan else 'NO'}"
    )
    for line in hybrid_plan.splitlines():
        if "Index" in line or "Scan" in line:
            _note("   " + line.strip())

    def pair(name: str, key: str, base: str = "", base_key: str = "") -> Rows:
        p50, p99 = results[key]
        if not base_key:
            return [
                (f"{label} {name} p50 (ms)", p50, "", 1.0),
                (f"{label} {name} p99 (ms)", p99, "", 1.0),
            ]
        b50, b99 = results[base_key]
        return [
            (f"{label} {name} p50 (ms)", p50, f"{base} p50", p50 / b50),
            (f"{label} {name} p99 (ms)", p99, f"{base} p99", p99 / b99),
        ]

    return [
        *pair("raw pgvector ORDER BY <=> LIMIT 10", "raw vector"),
        *pair("raw tsvector @@ plainto_tsquery", "raw lexical"),
        *pair("raw tsvector, words OR-ed, unbounded", "raw lexical or"),
        *pair("WordLlama embed of the query", "embed"),
        *pair("search in-process (embed+SQL+rank)", "in-process", "raw pgvector", "raw vector"),
        *pair("search over NATS (request->reply)", "nats", "raw pgvector", "raw vector"),
    ]


async def run(nats_url: str, dsn: str) -> Rows:
    embedder = await asyncio.to_thread(WordLlamaEmbedder)
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-memory"), source="bench")
    await ensure_streams(bus.js)
    await bus.js.purge_stream(MEMORY)
    settings = MemorySettings(
        database_url=dsn,
        health_port=None,
        memory_consolidation_interval=0,
        memory_extraction=False,
        memory_access_flush=3600,
    )
    app = MemoryApp(settings, bus=bus, embedder=embedder)
    raw: asyncpg.Pool[Any] | None = None
    rows: Rows = []
    try:
        await app.start()  # creates the vector extension the raw pool's codec needs
        raw = await asyncpg.create_pool(dsn, min_size=1, max_size=2, init=register_vector)
        assert raw is not None
        versions = await raw.fetchrow(
            "SELECT current_setting('server_version') AS pg,"
            " (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS vector"
        )
        assert versions is not None
        _note(f"PostgreSQL {versions['pg']}, pgvector {versions['vector']}, {embedder.name}")
        # Built as app.py builds the service's: the same SQL, weights and candidates.
        search = MemorySearch(
            app.pool,
            embedder,
            Weights(
                rrf_k=settings.memory_rrf_k,
                half_life_days=settings.memory_half_life_days,
                kinds=settings.memory_kind_weights,
            ),
            candidates=settings.memory_candidates,
        )
        rows += await _quality(app, search)
        rows += await _classes(app, search)
        texts = load_texts(LARGE)
        rows += await _ingest(app, raw, embedder, texts[:SMALL])
        rows += await _latency(app, search, raw, f"{SMALL / 1000:g}k")
        rows += await _copy_rest(raw, embedder, texts[SMALL:])
        rows += await _latency(app, search, raw, f"{LARGE / 1000:g}k")
        # The corpora's scopes are still there: judged again with 100k memories around them
        # (the common-word cut of lexicon.py applies from 5k memories).
        scope = parse_scope(f"repo:rank-{HELD_OUT.name}")
        rows += await _judge(app, search, HELD_OUT, scope, f" at {LARGE / 1000:g}k")
    finally:
        if raw is not None:
            await raw.close()
        with contextlib.suppress(Exception):
            await app.stop()
        await bus.close()
    return rows
