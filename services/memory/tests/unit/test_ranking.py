"""The pure parts: fusion and weighting, extraction answers and scopes, consolidation rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_events.events import ModelSpec, RepoSpec, RunConfig

from nexus_memory.consolidation import Thresholds, decide, negates
from nexus_memory.extraction import candidate_id, memory_scope, parse_answer
from nexus_memory.identifiers import held, identifiers
from nexus_memory.lexicon import common
from nexus_memory.search import Row, Weights, rank

NOW = datetime(2026, 11, 22, tzinfo=UTC)


def row(mid: str, *, sem: int | None, lex: int | None, age_days: float = 0, **kw: object) -> Row:
    values: dict[str, object] = {
        "memory_id": mid, "scope": "global", "kind": "fact", "text": mid,
        "source_run_id": None, "recorded_at": NOW - timedelta(days=age_days),
        "access_count": 0, "current": True, "semantic_rank": sem,
        "similarity": 0.5 if sem else None, "lexical_rank": lex, **kw,
    }  # fmt: skip
    return Row(**values)  # type: ignore[arg-type]


def test_found_by_both_retrievers_beats_found_by_one() -> None:
    items = rank([row("one", sem=1, lex=None), row("both", sem=2, lex=2)], NOW, 10, Weights())
    assert [i.memory_id for i in items] == ["both", "one"]
    assert items[0].why is not None
    assert items[0].why.fused == round(2 / (5 + 2), 6)  # the default k is 5


def test_a_small_rrf_constant_lets_a_first_place_beat_two_middling_ranks() -> None:
    """Why k is small: with k=60 ranks 1 and 20 weigh almost alike, so an item two retrievers
    rank 20th beats one a retriever ranks first; with k=5 the first place wins."""
    rows = [row("first", sem=None, lex=1), row("middling", sem=20, lex=20)]
    assert [i.memory_id for i in rank(rows, NOW, 10, Weights(rrf_k=60))] == ["middling", "first"]
    assert [i.memory_id for i in rank(rows, NOW, 10, Weights(rrf_k=5))] == ["first", "middling"]


def test_a_weak_word_match_does_not_outrank_the_vector_first() -> None:
    """A paraphrase: the answer is vector #1 and holds none of the query's words; another
    memory holds one of its four words (lexical #1) and is vector #3. Plain RRF ranks the
    weak match first (1/6 + 1/8 > 1/6); weighted by coverage (1/4 squared) it does not."""
    rows = [
        row("answer", sem=1, lex=None),
        row("one-word", sem=3, lex=1, coverage=0.25),
        row("other", sem=2, lex=None),
    ]
    assert [i.memory_id for i in rank(rows, NOW, 3, Weights())] == ["answer", "other", "one-word"]
    plain = Weights(coverage_power=0)
    assert rank(rows, NOW, 3, plain)[0].memory_id == "one-word"


def test_a_full_word_match_counts_fully() -> None:
    rows = [row("all-words", sem=4, lex=1, coverage=1.0), row("vector-first", sem=1, lex=None)]
    assert rank(rows, NOW, 2, Weights())[0].memory_id == "all-words"


def test_an_exact_identifier_ranks_above_its_near_misses() -> None:
    rows = [
        row("near", sem=1, lex=2, coverage=1.0, text="ERR_CONN_RESET_BY_PEER from the gateway"),
        row("exact", sem=3, lex=1, coverage=1.0, text="ERR_CONN_RESET from the gateway"),
        row("sibling", sem=2, lex=None, text="ERR_CONN_REFUSED from the gateway"),
    ]
    ranked = rank(rows, NOW, 3, Weights(), identifiers("ERR_CONN_RESET"))
    assert [i.memory_id for i in ranked] == ["exact", "near", "sibling"]
    # Without identifiers in the query nothing is boosted.
    assert rank(rows, NOW, 3, Weights(), identifiers("gateway errors"))[0].memory_id == "near"


def test_identifier_shaped_words() -> None:
    assert identifiers("what does E4012 mean") == ["E4012"]
    assert identifiers("ERR_CONN_RESET and PAY-1432, again PAY-1432") == [
        "ERR_CONN_RESET", "PAY-1432",
    ]  # fmt: skip
    assert identifiers("set FEATURE_FAST=0; KubePodCrashLooping fired") == [
        "FEATURE_FAST", "KubePodCrashLooping",
    ]  # fmt: skip
    # Plain words, numbers, acronyms and names are not identifiers.
    assert identifiers("how do I run the tests in CI after a 429") == []
    assert identifiers("GitHub and PostgreSQL on my iPhone") == []


def test_held_is_a_whole_token_match_case_aside() -> None:
    assert held(["PAY-1432"], "Ticket pay-1432 tracks it") == 1.0
    for near in ("PAY-14320", "XPAY-1432", "PAY-1432-B", "PAY-1432_OLD", "PAY-1423"):
        assert held(["PAY-1432"], f"Ticket {near} tracks it") == 0.0, near
    assert held(["E4012"], "Error E4012: archived (see E4013)") == 1.0
    assert held(["E4012", "E4013"], "E4012 only") == 0.5
    assert held([], "anything") == 0.0


def test_recency_access_kind_and_currency_weigh_in() -> None:
    w = Weights(half_life_days=30, kinds={"decision": 2.0})
    fresh, old = row("fresh", sem=1, lex=None), row("old", sem=1, lex=None, age_days=30)
    assert rank([old, fresh], NOW, 10, w)[0].memory_id == "fresh"
    old_item = rank([old], NOW, 10, w)[0]
    assert old_item.why is not None
    assert old_item.why.recency == 0.5
    used = row("used", sem=1, lex=None, access_count=20)
    assert rank([fresh, used], NOW, 10, w)[0].memory_id == "used"
    decision = row("decision", sem=2, lex=None, kind="decision")
    assert rank([fresh, decision], NOW, 10, w)[0].memory_id == "decision"
    stale = row("stale", sem=1, lex=1, current=False)
    assert rank([stale, row("cur", sem=2, lex=2)], NOW, 10, w)[0].memory_id == "cur"


def test_rank_cuts_to_the_limit_deterministically() -> None:
    rows = [row(f"m{i}", sem=1, lex=None) for i in range(5)]
    first = [i.memory_id for i in rank(rows, NOW, 3, Weights())]
    assert first == ["m0", "m1", "m2"]
    assert first == [i.memory_id for i in rank(list(reversed(rows)), NOW, 3, Weights())]


def test_parse_answer_reads_fenced_json_and_survives_prose() -> None:
    fenced = 'Sure:\n```json\n{"memories": [{"text": "Use uv", "kind": "fact"}]}\n```'
    assert [m.text for m in parse_answer(fenced).memories] == ["Use uv"]
    assert parse_answer("nothing to remember").memories == []
    assert parse_answer('{"memories": "oops"}').memories == []


def test_candidate_scope_words_map_to_the_runs_scopes() -> None:
    config = RunConfig(
        run_id="r1", agent_id="impl", task_id="T-7", system_prompt="x",
        model=ModelSpec(name="m"), repo=RepoSpec(url="https://github.com/acme/app.git"),
    )  # fmt: skip
    assert memory_scope("agent", config) == "agent-impl"
    assert memory_scope("task", config) == "task-T-7"
    assert memory_scope("repo", config) == "repo-github-com-acme-app"
    assert memory_scope("global", config) == "global"
    assert memory_scope("team", config) == "agent-impl"
    assert candidate_id("r1", 0) == candidate_id("r1", 0) != candidate_id("r1", 1)


def test_consolidation_rules() -> None:
    t = Thresholds(near_duplicate=0.95, contradiction=0.8)
    new = {"memory_id": "n", "kind": "fact", "text": "CI uses pytest", "content_hash": "h1"}

    def nb(**kw: object) -> dict[str, object]:
        return {"memory_id": "o", "kind": "fact", "text": "CI uses pytest", "content_hash": "h2",
                "similarity": 0.5, **kw}  # fmt: skip

    assert decide(new, [nb(content_hash="h1")], t, set()).reason == "duplicate"  # type: ignore[union-attr]
    near = decide(new, [nb(similarity=0.97)], t, set())
    assert near is not None
    assert (near.memory_id, near.by_memory_id, near.reason) == ("n", "o", "near_duplicate")
    flip = decide(new, [nb(similarity=0.85, text="CI does not use pytest")], t, set())
    assert flip is not None
    assert (flip.memory_id, flip.by_memory_id, flip.reason) == ("o", "n", "contradicted")
    assert decide(new, [nb(similarity=0.85)], t, set()) is None
    assert decide(new, [nb(content_hash="h1")], t, {"o"}) is None
    assert negates("we no longer deploy on Fridays")
    assert negates("don't use nose")
    assert not negates("notes live in docs/")


def test_common_lexemes_are_cut_only_in_a_large_table() -> None:
    elems, freqs = ["test", "run", "kafka"], [0.2, 0.011, 0.004, 0.004, 0.2, 0.0]
    assert common(elems, freqs, rows=100_000) == ["test", "run"]
    assert common(elems, freqs, rows=1_000) == []  # small: results independent of ANALYZE
    assert common(None, None, rows=100_000) == []  # never analysed
