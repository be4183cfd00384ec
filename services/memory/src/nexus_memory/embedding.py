"""Embedders: text to unit vectors, with no network by default.

`WordLlamaEmbedder` loads the 256-d weights shipped inside the `wordllama` wheel
(``WordLlama.load(cache_dir=<package dir>, disable_download=True)``: the default `load()`
would try a hub download first) and embeds on a worker thread. `OpenAIEmbedder` asks an
OpenAI-compatible ``/v1/embeddings`` endpoint. Both return L2-normalised float32 vectors, so
cosine distance is what pgvector's ``<=>`` computes.

An embedder's `name` (model and dimension) is recorded with the memory tables; a service
started with another embedder re-embeds everything by replaying NEXUS_MEMORY into fresh
tables, so dimensions never mix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from nexus_memory.config import MemorySettings

Vectors = npt.NDArray[np.float32]  # shape (n, dimension), rows of unit length


class Embedder(Protocol):
    name: str
    dimension: int

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit vector per text, in order."""


def normalise(vectors: npt.NDArray[Any]) -> Vectors:
    """Rows scaled to unit length; a zero row (a text with no known token) becomes the same
    fixed unit vector, so it is comparable instead of NaN."""
    out = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    zero = (norms == 0).ravel()
    if zero.any():
        out[zero] = 1.0
        norms[zero] = np.sqrt(out.shape[1])
    unit: Vectors = out / norms
    return unit


class WordLlamaEmbedder:
    """wordllama's `l2_supercat` model from the 256-d weights in its wheel; `dimension` below
    256 truncates them (the model is trained Matryoshka-style: 64/128 keep most quality)."""

    def __init__(self, config: str = "l2_supercat", dimension: int = 256) -> None:
        import wordllama  # type: ignore[import-untyped]

        self.dimension = dimension
        self.name = f"wordllama:{config}:{dimension}"
        self._model = wordllama.WordLlama.load(
            config=config,
            cache_dir=Path(wordllama.__file__).parent,
            dim=256,  # the only weights in the wheel; others would be downloaded
            trunc_dim=dimension if dimension < 256 else None,
            disable_download=True,
        )

    def embed_sync(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        raw = self._model.embed(list(texts), norm=False, return_np=True)
        return normalise(raw)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        # ~30 µs a text: small batches are cheaper inline than a thread hop.
        if len(texts) <= 8:
            return self.embed_sync(texts)
        return await asyncio.to_thread(self.embed_sync, texts)


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, LiteLLM, ...)."""

    def __init__(
        self, model: str, *, base_url: str | None, api_key: str, dimensions: int | None
    ) -> None:
        from openai import AsyncOpenAI

        self.model = model
        self._dimensions = dimensions
        self._client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=3)
        self.dimension = dimensions or 0
        self.name = f"openai:{model}:{self.dimension}"

    async def probe(self) -> None:
        """Learn the dimension from one call when the settings do not say it."""
        if not self.dimension:
            self.dimension = int((await self._raw(["dimension probe"])).shape[1])
            self.name = f"openai:{self.model}:{self.dimension}"

    async def _raw(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        extra: dict[str, Any] = {}
        if self._dimensions:
            extra["dimensions"] = self._dimensions
        reply = await self._client.embeddings.create(model=self.model, input=list(texts), **extra)
        rows = sorted(reply.data, key=lambda d: d.index)
        return np.asarray([r.embedding for r in rows], dtype=np.float32)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = normalise(await self._raw(texts))
        if vectors.shape[1] != self.dimension:
            raise ValueError(
                f"embedder {self.model} answered {vectors.shape[1]} dimensions,"
                f" the tables hold {self.dimension}"
            )
        return vectors

    async def close(self) -> None:
        await self._client.close()


async def make_embedder(settings: MemorySettings) -> Embedder:
    """The embedder the settings choose (the openai one probed for its dimension)."""
    if settings.memory_embedder == "openai":
        embedder = OpenAIEmbedder(
            settings.memory_embedding_model,
            base_url=settings.memory_embedding_base_url or settings.llm_base_url,
            api_key=settings.memory_embedding_api_key or settings.llm_api_key,
            dimensions=settings.memory_embedding_dimensions,
        )
        await embedder.probe()
        return embedder
    return await asyncio.to_thread(WordLlamaEmbedder)
