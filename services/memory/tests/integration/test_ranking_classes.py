"""Hybrid ranking on the held-out corpus (`bench.ranking_corpora.HELD_OUT`, never used to
choose the fusion's constants): per query class it is at least as good as the better single
retriever, and an exact identifier comes first, ahead of its near misses."""

from __future__ import annotations

import asyncio

from bench.ranking_corpora import CLASSES, HELD_OUT, evaluate, shortfalls
from nexus_events import subjects

from nexus_memory.app import MemoryApp
from nexus_memory.search import MemorySearch, Weights

from ..support import applied, ask, record

SCOPE = "repo-held-out"


async def _load(memory: MemoryApp) -> None:
    gate = asyncio.Semaphore(32)

    async def one(memory_id: str, text: str) -> None:
        async with gate:
            await record(memory.bus, text, SCOPE, memory_id=memory_id)

    await asyncio.gather(*(one(m, t) for m, t in HELD_OUT.memories.items()))
    await applied(memory)


async def _hybrid(memory: MemoryApp, query: str) -> list[str]:
    body = {"query": query, "scopes": [SCOPE], "limit": 10}
    reply = await ask(memory.bus, subjects.MEMORY_SEARCH, body)
    return [i["memory_id"] for i in reply["items"]]


async def test_paraphrases_share_no_word_with_their_targets(memory: MemoryApp):
    """What makes the paraphrase class one only the vector retriever can answer."""
    for q in HELD_OUT.queries:
        if q.kind != "paraphrase":
            continue
        shared = await memory.pool.fetchval(
            "SELECT to_tsvector('english', $1)"
            " @@ replace(plainto_tsquery('english', $2)::text, '&', '|')::tsquery",
            HELD_OUT.facts[q.target],
            q.text,
        )
        assert not shared, q


async def test_hybrid_matches_the_better_retriever_per_class_on_held_out(memory: MemoryApp):
    await _load(memory)
    s = memory.settings
    weights = Weights(s.memory_rrf_k, half_life_days=s.memory_half_life_days)
    search = MemorySearch(memory.pool, memory.embedder, weights, candidates=s.memory_candidates)
    scores = await evaluate(HELD_OUT, search, SCOPE, lambda q: _hybrid(memory, q))
    table = {
        c: {m: (round(s[c].recall_at_1, 2), round(s[c].mrr, 3)) for m, s in scores.items()}
        for c in CLASSES
    }
    assert not shortfalls(scores), table
    # Every identifier query: the memory holding it exactly first (near misses after it).
    for q in HELD_OUT.queries:
        if q.kind == "identifier":
            assert (await _hybrid(memory, q.text))[0] == q.target, q
