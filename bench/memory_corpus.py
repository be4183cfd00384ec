"""Memory benchmark data: a judged corpus for search quality, and bulk texts for load.

No public retrieval set installs offline, so the quality set ships here, built by code with a
fixed seed (no network, same bytes every run). It reads the way agents' memories read: facts
about building, testing, deploying and debugging services, with identifiers (service names,
error codes, flags) that lexical search catches, and queries that are either keyword-like or
paraphrases that share few words with their answer, which only a semantic match finds.

- `FACTS`: the judged memories (ids ``f01``...).
- `QUERIES`: query text and graded judgements, 3 = answers it, 2 = answers part of it,
  1 = useful background; every other memory is 0.
- `distractors`: generated memories about the *same* services and tools (hard negatives
  sharing the queries' names) and about others, none of which answers any query, so both
  retrievers have to rank rather than just match.
- `load_texts` / `latency_queries`: varied generated texts for the 10k/100k latency tables.

The corpus was written before any run of the benchmark and is not tuned to its results.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

FACTS: dict[str, str] = {
    "f01": "The payments-svc tests need PAYMENTS_SANDBOX=1 or they call the real gateway",
    "f02": "Run the whole test suite with make test; it starts PostgreSQL in a container",
    "f03": "Unit tests alone: pytest -m 'not integration' finishes in under a minute",
    "f04": "Deploys to production go through ArgoCD; never kubectl apply by hand",
    "f05": "Staging is promoted to production every Tuesday after the release review",
    "f06": "ERR_CONN_RESET from payments-svc means the gateway rotated its TLS certificate",
    "f07": "Database migrations live in db/migrations and run with alembic upgrade head",
    "f08": "Never edit an applied migration; add a new revision instead",
    "f09": "The auth-svc login flow uses OIDC with Keycloak as the identity provider",
    "f10": "Login failures after a Keycloak upgrade were fixed by clearing the JWKS cache",
    "f11": "Lint with ruff check and format with ruff format; CI rejects unformatted code",
    "f12": "Type checking is mypy --strict on every package under services/",
    "f13": "The frontend builds with pnpm build; node 20 is required",
    "f14": "Feature flags are read from LaunchDarkly; the key prefix is web-",
    "f15": "Grafana dashboards are provisioned from deploy/grafana; edits in the UI are lost",
    "f16": "OOMKilled pods of search-indexer need memory limit 2Gi, 1Gi is too small",
    "f17": "The search-indexer reindex job takes about 40 minutes for the full catalog",
    "f18": "Release branches are named release/YYYY-MM and tagged vX.Y.Z",
    "f19": "Hotfixes branch from the latest release tag, not from main",
    "f20": "The team prefers small pull requests under 400 changed lines",
    "f21": "Secrets are stored in Vault under kv/apps/<service>; never in the repository",
    "f22": "Rotating the Stripe webhook secret requires restarting payments-svc",
    "f23": "The orders-svc API is versioned in the URL: /v2 is current, /v1 is deprecated",
    "f24": "Rate limit errors (HTTP 429) from the GitHub API: back off using the reset header",
    "f25": "Local development uses docker compose up with the dev profile",
    "f26": "Flaky test_checkout_timeout depends on wall-clock time; freeze time with freezegun",
    "f27": "Customer data must stay in the eu-west-1 region for GDPR",
    "f28": "Backups of the orders database run nightly at 02:00 UTC and are kept 30 days",
    "f29": "To restore orders from backup use pg_restore with --no-owner into a fresh database",
    "f30": "Log lines are JSON with trace_id; search them in Loki by trace_id",
}

QUERIES: list[tuple[str, dict[str, int]]] = [
    # keyword-like: the answer shares the query's words
    ("how do I run the tests", {"f02": 3, "f03": 3, "f01": 1}),
    ("payments tests keep hitting the real gateway", {"f01": 3, "f06": 1, "f22": 1}),
    ("ERR_CONN_RESET", {"f06": 3}),
    ("mypy", {"f12": 3, "f11": 1}),
    ("Stripe webhook secret", {"f22": 3, "f21": 1}),
    ("GitHub returns 429", {"f24": 3}),
    ("test_checkout_timeout fails randomly", {"f26": 3}),
    ("naming of release branches and tags", {"f18": 3, "f19": 1}),
    ("how long does a full reindex take", {"f17": 3}),
    ("which orders API version should clients call", {"f23": 3}),
    ("Keycloak login", {"f09": 3, "f10": 2}),
    ("ruff", {"f11": 3}),
    ("database migrations", {"f07": 3, "f08": 2}),
    ("Grafana dashboards", {"f15": 3}),
    ("pg_restore", {"f29": 3, "f28": 1}),
    # paraphrases: few or none of the answer's words
    ("how do we ship a change to production", {"f04": 3, "f05": 2, "f18": 1}),
    ("what to do after payments connection resets", {"f06": 3, "f22": 1}),
    ("change the database schema", {"f07": 3, "f08": 2}),
    ("users cannot sign in after the identity provider update", {"f10": 3, "f09": 1}),
    ("code style checks in CI", {"f11": 3, "f12": 1}),
    ("build the web app", {"f13": 3, "f14": 1}),
    ("search-indexer keeps getting killed", {"f16": 3, "f17": 1}),
    ("urgent fix for a released version", {"f19": 3, "f18": 1}),
    ("where do credentials go", {"f21": 3, "f22": 1}),
    ("start everything locally", {"f25": 3}),
    ("where may we keep customer data", {"f27": 3}),
    ("recover lost orders", {"f29": 3, "f28": 2}),
    ("find the logs of one request", {"f30": 3}),
    ("dashboard changes disappeared", {"f15": 3}),
    ("how big should pull requests be", {"f20": 3}),
    ("container runs out of memory", {"f16": 3}),
    ("how often do we release", {"f05": 3, "f18": 1}),
    ("toggle a feature for some users", {"f14": 3}),
    ("javascript toolchain version", {"f13": 3}),
    ("how long are database snapshots retained", {"f28": 3}),
]

# Hard negatives: the services and tools the facts and queries name, in statements that answer
# none of the queries (ownership, alerting, sizes, contacts), plus services no query names.
_NAMED = [
    "payments-svc", "auth-svc", "orders-svc", "search-indexer", "the frontend", "Keycloak",
    "Grafana", "ArgoCD", "Vault", "Stripe", "Loki", "the GitHub app", "the CI runners",
    "staging", "the orders database",
]  # fmt: skip
_OTHER = ["billing-svc", "catalog-svc", "notify-svc", "users-svc", "cart-svc", "search-api"]
TEAMS = ["platform", "checkout", "identity", "growth", "data", "infra"]
DISTRACTOR_TEMPLATES = [
    "{e} exposes Prometheus metrics on port {port}",
    "The {e} on-call rotation changes every {n} days",
    "Alerts for {e} go to the #{slug}-alerts Slack channel",
    "{e} is owned by the {team} team",
    "The {e} README has an architecture diagram from 20{n}{n}",
    "{e} emits about {n} thousand log lines per minute at peak",
    "Questions about {e} go to the {team} team's office hours on Thursdays",
    "{e} had {n} incidents last quarter, none of them customer facing",
    "The {e} runbook lists who to page for escalation",
    "{e} runs {n} replicas in each availability zone",
    "The Kubernetes service account of {e} is named sa-{slug}",
    "{e} has a latency objective of {n}00 ms at p99",
    "Renovate batches dependency updates for {e} every week",
    "{e} sends its audit events to the {team} data warehouse",
]


def _slug(entity: str) -> str:
    return entity.removeprefix("the ").replace(" ", "-").lower()


def distractors(count: int, seed: int = 11) -> list[str]:
    """`count` generated memories, two thirds about the named services (hard negatives)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        entity = rng.choice(_NAMED if i % 3 else _OTHER)
        template = rng.choice(DISTRACTOR_TEMPLATES)
        text = template.format(
            e=entity,
            slug=_slug(entity),
            team=rng.choice(TEAMS),
            n=rng.randint(2, 9),
            port=rng.randint(8000, 9999),
        ).replace("The the ", "The ")  # templates that start "The {e}" with e = "the ..."
        out.append(text[0].upper() + text[1:])
    return out


# -- load: varied texts for the latency tables ------------------------------------------------

_WORDS = [
    "billing", "catalog", "notify", "users", "cart", "search", "orders", "payments", "auth",
    "inventory", "shipping", "pricing", "reviews", "media", "profile", "session", "ledger",
    "report", "export", "import", "sync", "audit", "fraud", "tax", "coupon", "invoice",
    "refund", "webhook", "queue", "scheduler", "mailer", "gateway", "ranking", "feed", "chat",
    "upload", "thumbnail",
]  # fmt: skip
_KINDS = ["svc", "api", "worker", "indexer", "cron", "proxy"]
_THINGS = [
    "invoice", "product", "email", "session", "address", "coupon", "price", "token", "cart",
    "order", "refund", "user", "report", "image", "payload", "batch", "job", "cache", "index",
    "schema", "table", "topic", "event", "message",
]  # fmt: skip
_TOOLS = [
    "pytest", "ruff", "mypy", "alembic", "helm", "terraform", "kubectl", "docker", "pnpm",
    "poetry", "uv", "redis", "kafka", "nats", "postgres", "grafana", "loki", "vault", "argocd",
    "sentry",
]  # fmt: skip
_LOAD_TEMPLATES = [
    *DISTRACTOR_TEMPLATES,
    "{e} caches {thing} lookups for {n} seconds in Redis",
    "{e} retries {thing} calls {n} times with exponential backoff",
    "{e} owns the {thing} table; other services read it through its API",
    "The {e} load test reaches {n}00 requests per second on staging",
    "{e} was moved from Python 3.{n} to 3.11 last quarter",
    "Run the {e} tests with {tool} after starting {tool2}",
    "{e} stores {thing} data in {tool2} and keeps it {n} days",
    "When {e} fails with a {thing} timeout, check the {tool2} connection pool first",
    "The {e} deploy uses {tool} and takes about {n} minutes",
    "{e} publishes a {thing} event for every change; consumers must be idempotent",
    "Never call {e} directly from the browser; go through the {thing} gateway",
    "{e} rejects {thing} payloads over {n} MB with HTTP 413",
]


def load_texts(count: int, seed: int = 7) -> list[str]:
    """`count` plausible, varied memories about some 200 generated services."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        entity = f"{rng.choice(_WORDS)}-{rng.choice(_KINDS)}"
        template = rng.choice(_LOAD_TEMPLATES)
        text = template.format(
            e=entity,
            slug=entity,
            team=rng.choice(TEAMS),
            thing=rng.choice(_THINGS),
            tool=rng.choice(_TOOLS),
            tool2=rng.choice(_TOOLS),
            n=rng.randint(2, 9),
            port=rng.randint(8000, 9999),
        )
        out.append(text[0].upper() + text[1:])
    return out


_QUESTION_TEMPLATES = [
    "how long does {e} cache {thing} lookups",
    "who owns {e}",
    "how do I run the {e} tests",
    "{e} {thing} timeout",
    "where do {e} alerts go",
    "how many replicas of {e}",
    "{e} deploy with {tool}",
    "why does {e} reject large {thing} payloads",
]


def latency_queries(count: int, seed: int = 5) -> list[str]:
    """Queries for the latency tables: generated questions about the loaded services,
    interleaved with the judged queries."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if i % 4 == 0:
            out.append(QUERIES[(i // 4) % len(QUERIES)][0])
            continue
        out.append(
            rng.choice(_QUESTION_TEMPLATES).format(
                e=f"{rng.choice(_WORDS)}-{rng.choice(_KINDS)}",
                thing=rng.choice(_THINGS),
                tool=rng.choice(_TOOLS),
            )
        )
    return out


# -- scoring ----------------------------------------------------------------------------------


def recall_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """Share of the relevant memories (grade >= 1) in the first `k`."""
    relevant = {m for m, g in grades.items() if g > 0}
    return len(relevant & set(ranked[:k])) / len(relevant)


def ndcg_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k with gain 2^grade - 1 and log2 discount, against the ideal order of the
    judgements."""

    def dcg(gs: Sequence[int]) -> float:
        return sum((2.0**g - 1) / math.log2(i + 2) for i, g in enumerate(gs[:k]))

    ideal = dcg(sorted(grades.values(), reverse=True))
    return dcg([grades.get(m, 0) for m in ranked]) / ideal
