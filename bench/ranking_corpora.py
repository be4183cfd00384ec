"""Labelled corpora for memory ranking, one query class at a time: a tuning set and a held-out set.

Three classes of query, each with exactly one target memory:

- ``paraphrase``: the query shares no word with its target (after PostgreSQL's english
  stemming and stop words; the memory tests check it), so only the vector retriever can find
  it. Three or four were written per target; the one kept is the one WordLlama ranks best
  (chosen on vector-only ranks, never on hybrid): the class asks whether fusion keeps what
  the vector retriever finds, not whether static word vectors understand every rewording.
- ``keyword``: the query repeats the target's distinctive words.
- ``identifier``: the query names an exact identifier (error code, ticket key, flag, alert);
  the corpus holds near-miss identifiers (a swapped digit, a longer key, a sibling code) in
  memories worded like the target, and only the target holds the exact one.

`TUNING` and `HELD_OUT` are about different systems (a web shop; a data and mobile platform)
and share no memory or query. Fusion constants are chosen on `TUNING` only; `HELD_OUT` is what
the bench and the integration test judge. Each corpus adds generated hard negatives that name
its own services (`memory_corpus`'s distractor templates), so retrievers have to rank, not
just match. Everything is literal or built with a fixed seed: the same bytes every run.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from nexus_events.events import MemorySearchRequest
from nexus_memory.search import MemorySearch, Row, Weights, rank

from bench.memory_corpus import DISTRACTOR_TEMPLATES, TEAMS

CLASSES = ("paraphrase", "keyword", "identifier")


@dataclass(frozen=True)
class Query:
    kind: str  # one of CLASSES
    text: str
    target: str  # the memory id that answers it


@dataclass(frozen=True)
class Corpus:
    name: str
    facts: Mapping[str, str]  # the targets: memory id -> text
    queries: Sequence[Query]
    near_misses: Sequence[str]  # memories worded like identifier targets, other identifiers
    entities: Sequence[str]  # what the generated hard negatives talk about
    seed: int
    distractor_count: int = 300
    memories: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        out = dict(self.facts)
        out.update({f"{self.name}-n{i:03d}": t for i, t in enumerate(self.near_misses)})
        for i, text in enumerate(_distractors(self.entities, self.distractor_count, self.seed)):
            out[f"{self.name}-d{i:04d}"] = text
        object.__setattr__(self, "memories", out)


def _distractors(entities: Sequence[str], count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        entity = rng.choice(entities)
        text = (
            rng.choice(DISTRACTOR_TEMPLATES)
            .format(
                e=entity,
                slug=entity.removeprefix("the ").replace(" ", "-").lower(),
                team=rng.choice(TEAMS),
                n=rng.randint(2, 9),
                port=rng.randint(8000, 9999),
            )
            .replace("The the ", "The ")
        )
        out.append(text[0].upper() + text[1:])
    return out


TUNING = Corpus(
    name="tune",
    facts={
        "t01": "Deploys to production go through ArgoCD; never kubectl apply by hand",
        "t02": "Database migrations live in db/migrations and run with alembic upgrade head",
        "t03": "Secrets are stored in Vault under kv/apps; never commit them to the repository",
        "t04": "The frontend builds with pnpm; node 20 is required",
        "t05": "Customer data must stay in the eu-west-1 region for GDPR",
        "t06": "Backups of the orders database run nightly and are kept for 30 days",
        "t07": "Grafana dashboards are provisioned from files; edits made in the browser are lost",
        "t08": "OOMKilled pods of search-indexer need a memory limit of 2Gi",
        "t09": "Flaky checkout tests depend on wall-clock time; freeze time with freezegun",
        "t10": "Hotfixes branch from the latest release tag, not from main",
        "t11": "Log lines are JSON with trace_id; search them in Loki",
        "t12": "The team prefers small pull requests under 400 changed lines",
        "t13": "Run the whole test suite with make test; it starts PostgreSQL in a container",
        "t14": "Lint with ruff check and format with ruff format; CI rejects unformatted code",
        "t15": "Type checking is mypy --strict on every package",
        "t16": "Rotating the Stripe webhook secret requires restarting the payments service",
        "t17": "The search-indexer reindex job takes about 40 minutes for the full catalog",
        "t18": "Feature flags are read from LaunchDarkly with the web- key prefix",
        "t19": "Local development uses docker compose with the dev profile",
        "t20": "Release branches are named release/YYYY-MM and tagged with semver",
        "t21": "ERR_CONN_RESET from the payments gateway means its TLS certificate was rotated",
        "t22": "Ticket PAY-1432 tracks the double charge on retried card payments",
        "t23": "Error E4012 from the inventory API means the SKU is archived",
        "t24": "Incident INC-2207 was caused by an expired DNS record for the shop API",
        "t25": "Set FEATURE_FAST_CHECKOUT=0 to disable the new checkout flow",
        "t26": "Alert KubePodCrashLooping fires after 3 restarts in 10 minutes",
        "t27": "Ticket OPS-981 holds the runbook for rotating database passwords",
        "t28": "Sentry issue WEB-3F2A is the empty cart crash on Safari",
    },
    queries=[
        Query("paraphrase", "promote a version to prod", "t01"),
        Query("paraphrase", "evolve the SQL schema", "t02"),
        Query("paraphrase", "credential storage", "t03"),
        Query("paraphrase", "what NodeJS release do I need", "t04"),
        Query("paraphrase", "european privacy regulation storage location", "t05"),
        Query("paraphrase", "how long are snapshots retained", "t06"),
        Query("paraphrase", "chart modifications disappear", "t07"),
        Query("paraphrase", "container keeps dying from RAM exhaustion", "t08"),
        Query("paraphrase", "randomly failing unit specs because of datetime", "t09"),
        Query("paraphrase", "emergency fix for production version", "t10"),
        Query("paraphrase", "where to query application output", "t11"),
        Query("paraphrase", "diff size for reviews", "t12"),
        Query("keyword", "make test PostgreSQL", "t13"),
        Query("keyword", "ruff format CI", "t14"),
        Query("keyword", "mypy strict", "t15"),
        Query("keyword", "Stripe webhook secret", "t16"),
        Query("keyword", "full catalog reindex", "t17"),
        Query("keyword", "LaunchDarkly feature flags", "t18"),
        Query("keyword", "docker compose dev profile", "t19"),
        Query("keyword", "release branch naming", "t20"),
        Query("identifier", "ERR_CONN_RESET", "t21"),
        Query("identifier", "PAY-1432", "t22"),
        Query("identifier", "what does E4012 mean", "t23"),
        Query("identifier", "INC-2207 root cause", "t24"),
        Query("identifier", "FEATURE_FAST_CHECKOUT", "t25"),
        Query("identifier", "KubePodCrashLooping", "t26"),
        Query("identifier", "OPS-981", "t27"),
        Query("identifier", "WEB-3F2A crash", "t28"),
    ],
    near_misses=[
        "ERR_CONN_REFUSED from the payments gateway means it is down for maintenance",
        "ERR_CONN_RESET_BY_PEER from the payments gateway means a load balancer timed out",
        "ERR_CONN_TIMEOUT from the payments gateway means its network is saturated",
        "Ticket PAY-1423 tracks the missing receipt on refunded card payments",
        "Ticket PAY-14320 tracks the currency rounding on card payments",
        "Ticket PAY-1342 tracks the slow retries of card payments",
        "Error E4021 from the inventory API means the SKU is locked",
        "Error E4012A from the inventory API means the SKU price is missing",
        "Error E4013 from the inventory API means the SKU is out of stock",
        "Incident INC-2270 was caused by a full disk on the shop database",
        "Incident INC-2217 was caused by an expired TLS certificate for the shop API",
        "Incident INC-22070 was caused by a bad config push to the shop API",
        "Set FEATURE_FAST_SEARCH=0 to disable the new search ranking",
        "Set FEATURE_FAST_CHECKOUT_V2=0 to disable the second checkout redesign",
        "Set FEATURE_SLOW_CHECKOUT=1 to force the old checkout flow",
        "Alert KubePodNotReady fires after 5 minutes without readiness",
        "Alert KubePodCrashLoopingWarning fires after 2 restarts in 10 minutes",
        "Alert KubeContainerWaiting fires after 1 hour in a waiting state",
        "Ticket OPS-918 holds the runbook for rotating TLS certificates",
        "Ticket OPS-9810 holds the runbook for rotating database replicas",
        "Ticket OPS-98 holds the runbook for restoring database backups",
        "Sentry issue WEB-3F2B is the checkout button crash on Safari",
        "Sentry issue WEB-3F2 is the empty wishlist crash on Firefox",
        "Sentry issue WEB-3FA2 is the cart total crash on Chrome",
    ],
    entities=[
        "payments-svc",
        "orders-svc",
        "search-indexer",
        "the frontend",
        "the shop API",
        "the inventory API",
        "the checkout flow",
        "ArgoCD",
        "Vault",
        "Grafana",
        "Loki",
        "Stripe",
        "billing-svc",
        "cart-svc",
        "users-svc",
    ],
    seed=29,
)

HELD_OUT = Corpus(
    name="held",
    facts={
        "h01": "Airflow DAGs are deployed by merging to the dags branch; the scheduler picks"
        " them up within five minutes",
        "h02": "The iOS app is signed with the distribution certificate kept in Fastlane match",
        "h03": "Spark jobs that shuffle more than 200 GB must use the large executor pool",
        "h04": "Warehouse tables older than two years are moved to cold storage in Glacier",
        "h05": "Analysts query the warehouse through Trino; direct Postgres access is revoked",
        "h06": "Android builds fail on Gradle 8 unless the Kotlin plugin is pinned to 1.9",
        "h07": "On-call engineers must acknowledge pages within fifteen minutes",
        "h08": "Personal identifiers are hashed with a salted SHA-256 before landing in the lake",
        "h09": "The nightly ETL finishes around 04:30 UTC; dashboards refresh after it",
        "h10": "Push notifications go through Firebase for Android and APNs for iOS",
        "h11": "Kafka consumer lag above 10k messages on the events topic pages the data team",
        "h12": "dbt models are tested with dbt test in CI before every merge",
        "h13": "The feature store is backed by Redis with a 24 hour TTL",
        "h14": "Schema changes to Avro topics must stay backward compatible in the registry",
        "h15": "Mobile release trains leave every second Wednesday",
        "h16": "Crash reports from the app are collected by Crashlytics",
        "h17": "Terraform state for the data platform lives in S3 with DynamoDB locking",
        "h18": "Great Expectations suites validate every raw table before transformation",
        "h19": "Error DAG_IMPORT_TIMEOUT means a DAG file takes longer than 30 seconds to parse",
        "h20": "Ticket DATA-2719 tracks duplicate rows in the orders fact table",
        "h21": "SQLSTATE 40P01 from Trino means a deadlock; retry the query",
        "h22": "Crash signature EXC_BAD_ACCESS in ImageCache is fixed in the next app release",
        "h23": "Incident INC-3301 was a Kafka broker whose disk filled up",
        "h24": "The flag ENABLE_STREAMING_JOIN=false falls back to batch joins",
        "h25": "Alert DataFreshnessBreached fires when a table is more than 6 hours late",
        "h26": "Runbook RB-77 explains how to resync the CDC connector",
    },
    queries=[
        Query("paraphrase", "ship a new workflow to the orchestrator", "h01"),
        Query("paraphrase", "codesigning the iPhone application", "h02"),
        Query("paraphrase", "huge datasets need beefier workers", "h03"),
        Query("paraphrase", "retention of old datasets", "h04"),
        Query("paraphrase", "BI users SQL", "h05"),
        Query("paraphrase", "mobile compile broken after upgrading tooling", "h06"),
        Query("paraphrase", "how fast to answer the pager", "h07"),
        Query("paraphrase", "anonymise PII", "h08"),
        Query("paraphrase", "when are the morning reports up to date", "h09"),
        Query("paraphrase", "smartphone alert delivery", "h10"),
        Query("keyword", "Kafka consumer lag", "h11"),
        Query("keyword", "dbt test CI", "h12"),
        Query("keyword", "feature store Redis TTL", "h13"),
        Query("keyword", "Avro schema registry", "h14"),
        Query("keyword", "mobile release trains", "h15"),
        Query("keyword", "Crashlytics crash reports", "h16"),
        Query("keyword", "Terraform state locking", "h17"),
        Query("keyword", "Great Expectations suites", "h18"),
        Query("identifier", "DAG_IMPORT_TIMEOUT", "h19"),
        Query("identifier", "DATA-2719", "h20"),
        Query("identifier", "what is 40P01", "h21"),
        Query("identifier", "EXC_BAD_ACCESS", "h22"),
        Query("identifier", "INC-3301 cause", "h23"),
        Query("identifier", "ENABLE_STREAMING_JOIN", "h24"),
        Query("identifier", "DataFreshnessBreached", "h25"),
        Query("identifier", "RB-77", "h26"),
    ],
    near_misses=[
        "Error DAG_IMPORT_ERROR means a DAG file raised an exception while parsing",
        "Error DAG_IMPORT_TIMEOUT_WARNING means a DAG file took longer than 20 seconds",
        "Error DAG_PARSE_TIMEOUT means the DAG processor was killed while parsing",
        "Ticket DATA-2791 tracks missing rows in the orders fact table",
        "Ticket DATA-27190 tracks late rows in the orders fact table",
        "Ticket DATA-2179 tracks duplicate rows in the refunds fact table",
        "SQLSTATE 40P02 from Trino means a lock timeout; retry the query later",
        "SQLSTATE 40001 from Trino means a serialization failure; retry the query",
        "SQLSTATE 40P010 from Trino means a cancelled query; do not retry it",
        "Crash signature EXC_BAD_INSTRUCTION in ImageCache is fixed in the next app release",
        "Crash signature EXC_BAD_ACCESS_KERN in VideoCache is fixed in the next app release",
        "Crash signature EXC_BREAKPOINT in ImageCache is tracked for the next app release",
        "Incident INC-3310 was a Kafka broker whose network card failed",
        "Incident INC-3031 was a Kafka broker whose certificate expired",
        "Incident INC-33010 was a Kafka broker whose memory filled up",
        "The flag ENABLE_STREAMING_SINK=false falls back to batch writes",
        "The flag ENABLE_BATCH_JOIN=false turns off batch joins entirely",
        "The flag ENABLE_STREAMING_JOIN_V2=true switches to the new join engine",
        "Alert DataVolumeBreached fires when a table holds fewer rows than expected",
        "Alert DataFreshnessWarning fires when a table is more than 3 hours late",
        "Alert DataFreshnessBreachedCritical fires when a table is more than a day late",
        "Runbook RB-7 explains how to restart the CDC connector",
        "Runbook RB-770 explains how to resync the search connector",
        "Runbook RB-71 explains how to pause the CDC connector",
    ],
    entities=[
        "Airflow",
        "the iOS app",
        "the Android app",
        "Spark",
        "the warehouse",
        "Trino",
        "Kafka",
        "dbt",
        "the feature store",
        "the data lake",
        "Crashlytics",
        "Firebase",
        "the CDC connector",
        "the ETL",
        "ingest-svc",
    ],
    seed=31,
)

CORPORA = (TUNING, HELD_OUT)


# -- scoring ----------------------------------------------------------------------------------


def reciprocal_rank(ranked: Sequence[str], target: str) -> float:
    """1/position of `target` in `ranked` (1-based), 0 if absent."""
    return 1.0 / (ranked.index(target) + 1) if target in ranked else 0.0


@dataclass
class ClassScores:
    """recall@1 and MRR of one method on one query class."""

    firsts: int = 0
    reciprocal: float = 0.0
    queries: int = 0

    def add(self, ranked: Sequence[str], target: str) -> None:
        rr = reciprocal_rank(ranked, target)
        self.firsts += rr == 1.0
        self.reciprocal += rr
        self.queries += 1

    @property
    def recall_at_1(self) -> float:
        return self.firsts / self.queries if self.queries else 0.0

    @property
    def mrr(self) -> float:
        return self.reciprocal / self.queries if self.queries else 0.0

    def key(self) -> tuple[float, float]:
        """For "at least as good as": recall@1 first, then MRR."""
        return (round(self.recall_at_1, 6), round(self.mrr, 6))


# -- evaluation -------------------------------------------------------------------------------

METHODS = ("vector", "lexical", "plain RRF", "hybrid")


def single_retriever(rows: Sequence[Row], signal: str, weights: Weights, limit: int) -> list[str]:
    """The service's ranking of its own candidates with the other retriever's ranks removed
    (same recency, access and kind weights; lexical ranks not weighted by coverage, so
    lexical-only is the retriever's own order): what vector-only or lexical-only search
    would answer."""
    if signal == "vector":
        kept = [replace(r, lexical_rank=None, coverage=None) for r in rows if r.semantic_rank]
    else:
        kept = [
            replace(r, semantic_rank=None, similarity=None, coverage=None)
            for r in rows
            if r.lexical_rank
        ]
    return [i.memory_id for i in rank(kept, datetime.now(UTC), limit, weights)]


Scores = dict[str, dict[str, ClassScores]]  # method -> query class -> scores


async def evaluate(
    corpus: Corpus,
    search: MemorySearch,
    scope: str,
    hybrid: Callable[[str], Awaitable[list[str]]],
    limit: int = 10,
) -> Scores:
    """recall@1 and MRR per query class of vector-only, lexical-only (the service's SQL and
    `rank`, one retriever removed), plain RRF (`rank` on the same candidates without the
    coverage weighting and identifier bonus: the fusion before issue 29) and hybrid
    (`hybrid`: the service's answer)."""
    scores: Scores = {m: {c: ClassScores() for c in CLASSES} for m in METHODS}
    for q in corpus.queries:
        request = MemorySearchRequest(query=q.text, scopes=[scope], limit=limit)
        rows = await search.fetch_candidates(request)
        for signal in ("vector", "lexical"):
            ranked = single_retriever(rows, signal, search.weights, limit)
            scores[signal][q.kind].add(ranked, q.target)
        plain = replace(search.weights, coverage_power=0.0, identifier=0.0)
        ranked = [i.memory_id for i in rank(rows, datetime.now(UTC), limit, plain)]
        scores["plain RRF"][q.kind].add(ranked, q.target)
        scores["hybrid"][q.kind].add(await hybrid(q.text), q.target)
    return scores


def shortfalls(scores: Scores) -> list[str]:
    """The query classes where hybrid is worse than the better single retriever."""
    out = []
    for c in CLASSES:
        best = max(scores["vector"][c].key(), scores["lexical"][c].key())
        if scores["hybrid"][c].key() < best:
            out.append(f"{c}: hybrid {scores['hybrid'][c].key()} < best single {best}")
    return out
