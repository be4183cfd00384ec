"""Memory's settings, from the environment (prefix ``NEXUS_``; NATS itself: ``NEXUS_NATS_*``).

Memory-only settings are named ``NEXUS_MEMORY_*`` except those a deployment shares with the
runner (``NEXUS_LLM_*``: the model server extraction asks).
"""

from __future__ import annotations

from typing import Literal

from nexus_events.contract.runstate import RunEvent
from nexus_events.runtime.lease import LeaseTtl
from nexus_events.runtime.settings import (
    ConsumerPrefix,
    HealthPortSetting,
    PoolSize,
    ServiceSettings,
)
from pydantic import Field

DEFAULT_KIND_WEIGHTS = {"decision": 1.2, "preference": 1.1, "fact": 1.0, "observation": 0.9}


class MemorySettings(ServiceSettings):
    # Its database needs the pgvector extension (created at start-up if missing).
    health_port: HealthPortSetting = 8083
    consumer_prefix: ConsumerPrefix = "memory"
    db_pool_size: PoolSize = 8
    # -- embeddings ----------------------------------------------------------------------
    memory_embedder: Literal["wordllama", "openai"] = Field(
        "wordllama",
        description="wordllama: 256-d weights inside the wheel, no network; openai: an"
        " OpenAI-compatible /v1/embeddings endpoint.",
    )
    memory_embedding_model: str = Field(
        "text-embedding-3-small", description="Model name of the openai embedder."
    )
    memory_embedding_base_url: str | None = Field(
        None, description="Base URL of the openai embedder (default: NEXUS_LLM_BASE_URL)."
    )
    memory_embedding_api_key: str | None = Field(
        None, description="API key of the openai embedder (default: NEXUS_LLM_API_KEY)."
    )
    memory_embedding_dimensions: int | None = Field(
        None, gt=0, le=16000, description="Dimensions asked of the openai embedder."
    )
    # -- search ----------------------------------------------------------------------------
    memory_candidates: int = Field(
        50, gt=0, le=1000, description="Candidates each retriever gives the fusion."
    )
    # RRF's customary 60 was set for fusing lists of ~1,000 results; over 50 candidates per
    # retriever it makes ranks 1 and 50 weigh almost the same, so an item both retrievers
    # rank middling beats one that either ranks first (bench/bench_memory.py shows it).
    memory_rrf_k: int = Field(
        5, gt=0, description="Reciprocal-rank-fusion constant (small: the top ranks count)."
    )
    memory_half_life_days: float = Field(
        30.0, gt=0, description="Recency half-life: a memory this old weighs half as much."
    )
    memory_kind_weights: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_KIND_WEIGHTS),
        description="Weight per kind (JSON); other kinds weigh 1.",
    )
    memory_access_flush: float = Field(
        5.0, gt=0, description="Seconds between `accessed` batches (search hits)."
    )
    # -- secret guard ------------------------------------------------------------------------
    memory_secret_policy: Literal["block", "redact"] = Field(
        "block", description="A text with a secret: block (dead letter) or redact it."
    )
    # -- extraction ---------------------------------------------------------------------------
    memory_extraction: bool = Field(True, description="Extract memories from finished runs.")
    memory_extraction_events: list[str] = Field(
        default_factory=lambda: [RunEvent.COMPLETED.value, RunEvent.FAILED.value],
        description="Terminal run events that trigger extraction.",
    )
    memory_extraction_max: int = Field(5, gt=0, le=50, description="Most memories per run.")
    llm_base_url: str | None = Field(
        None, description="Model server of extraction when the run's model names none."
    )
    llm_api_key: str = Field("not-needed", description="API key for the model server.")
    llm_timeout: float = Field(60.0, gt=0, description="Seconds for one extraction call.")
    # -- consolidation ------------------------------------------------------------------------
    memory_consolidation_interval: float = Field(
        3600.0, ge=0, description="Seconds between consolidation passes (0: never)."
    )
    memory_near_duplicate: float = Field(
        0.95, gt=0, le=1, description="Cosine similarity from which two memories are one."
    )
    memory_contradiction: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Similarity from which a newer memory that negates an older one supersedes it.",
    )
    memory_decay_days: float = Field(
        90.0, gt=0, description="Unused this many days (and that old): marked stale."
    )
    # -- service -------------------------------------------------------------------------------
    projection_batch: int = Field(500, gt=0, description="Events per projection transaction.")
    # Several replicas: the lease holder projects and consolidates on its interval, all
    # answer search/record/list. Not NEXUS_LEASE_BUCKET (the scheduler's): never shared.
    memory_lease_bucket: str = Field(
        "nexus_memory_lease",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="JetStream KV bucket of the lease of the projecting replica.",
    )
    lease_ttl_seconds: LeaseTtl = 10.0
