"""Hybrid ranking on the held-out corpus (`bench.ranking_corpora.HELD_OUT`, never used to
choose the fusion's constants): per query class it is at least as good as the better single
retriever, and an exact identifier comes first, ahead of its near misses."""

from __future__ import annotations

import pytest
from bench.ranking_corpora import CLASSES, HELD_OUT, evaluate, shortfalls
from nexus_events.contract import subjects
from nexus_events.events import MemorySearchRequest

from nexus_memory.app import MemoryApp
from nexus_memory.search import MemorySearch, Weights

from ..support import applied, ask, record

SCOPE = "repo-held-out"


async def _load(memory: MemoryApp) -> None:
    # One at a time, in the corpus' order: fusion weighs by recency and breaks ties by it,
    # so memories recorded concurrently (in whatever order their events were stored) ranked
    # a paraphrase target differently from run to run (MRR 0.24 against 0.25 in a CI run).
    for memory_id, text in HELD_OUT.memories.items():
        await record(memory.bus, text, SCOPE, memory_id=memory_id)
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


async def test_common_words_leave_only_the_any_word_tier(
    memory: MemoryApp, monkeypatch: pytest.MonkeyPatch
):
    """In a large table the most common lexemes (lexicon.py) are not asked of the index for
    "any word" matches; memories holding every word are still found through the rarer ones."""
    ids = {
        "both": await record(memory.bus, "Run the tests with make test", SCOPE),
        "common only": await record(memory.bus, "Run the linter every night", SCOPE),
        "rare only": await record(memory.bus, "Flaky tests are quarantined", SCOPE),
    }
    await applied(memory)
    search = MemorySearch(memory.pool, memory.embedder, Weights())
    request = MemorySearchRequest(query="run tests", scopes=[SCOPE], limit=10)

    async def lexical(common: list[str]) -> set[str]:
        async def words() -> list[str]:
            return common

        monkeypatch.setattr(search.common_words, "get", words)
        rows = await search.fetch_candidates(request)
        found = {r.memory_id for r in rows if r.lexical_rank is not None}
        return {name for name, mid in ids.items() if mid in found}

    assert await lexical([]) == {"both", "common only", "rare only"}
    assert await lexical(["run"]) == {"both", "rare only"}
    assert await lexical(["run", "test"]) == {"both"}  # every word common: the full AND
