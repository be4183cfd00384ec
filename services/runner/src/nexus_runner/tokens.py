"""Token counts of a chat request: the model's real tokenizer where it is known and ships with
the runner (OpenAI's encodings, nexus_runner/encodings), a conservative estimate otherwise.

Nothing here touches the network: the encodings are read from the package's own files and
checked against the hashes tiktoken itself expects, never fetched (issue 24)."""

from __future__ import annotations

import abc
import base64
import gzip
import hashlib
import json
import logging
import math
from collections import OrderedDict
from functools import cache
from importlib import resources
from typing import Any, Protocol

import tiktoken

from nexus_runner.context_defaults import encoding_for
from nexus_runner.errors import RunnerError

log = logging.getLogger(__name__)

# What the chat format adds around each message (role markers, separators) and before the
# reply, per OpenAI's published counting recipe; a message's `name` costs one more.
PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
# A tool call's own framing (id, type, the function's wrapper) beyond its name and arguments;
# tool-message call ids likewise. Over-counted on purpose: the budget's margin covers the rest.
PER_TOOL_CALL = 8
PER_TOOL_CALL_ID = 4
# An image part: the provider's cost depends on its size, unknown here; the runner sends none.
PER_IMAGE = 1_000
# Unknown tokenizers are estimated with a shipped BPE, scaled up. A BPE follows what the text is
# (prose about 4.5 bytes a token, JSON 2.5, base64 1.4) where a bytes ratio cannot, and the
# open families' tokenizers descend from cl100k (Llama 3, Qwen) or are within about 20 % of it
# on code and English. Over-counting only condenses a little early; under-counting fails the
# run with a 400.
ESTIMATE_ENCODING = "cl100k_base"
ESTIMATE_FACTOR = 1.25
# Without any encoding (a broken install): bytes of UTF-8 over 2, above even dense JSON's 2.5.
BYTES_PER_TOKEN = 2
# Texts whose token counts are remembered, least recently used out first. Keyed by the string's
# hash and length, not the string, so the cache pins no 20 KB tool outputs in memory.
CACHE_SIZE = 4_096

ENCODING_FILES: dict[str, tuple[str, str]] = {
    # name -> (file in nexus_runner/encodings, SHA-256 of its uncompressed content, as in
    # tiktoken_ext.openai_public)
    "cl100k_base": (
        "cl100k_base.tiktoken.gz",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        "o200k_base.tiktoken.gz",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}

_ENDOFTEXT = "<|endoftext|>"
_ENDOFPROMPT = "<|endofprompt|>"
# The encodings' split patterns and special tokens, as tiktoken_ext.openai_public defines them
# (tests/unit/test_context.py checks they still match the installed tiktoken).
PATTERNS: dict[str, str] = {
    "cl100k_base": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}
SPECIAL_TOKENS: dict[str, dict[str, int]] = {
    "cl100k_base": {
        _ENDOFTEXT: 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        _ENDOFPROMPT: 100276,
    },
    "o200k_base": {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
}


class EncodingUnavailable(RunnerError):  # noqa: N818 - reads as a fact, like LlmUnavailable
    """A shipped encoding file is missing or not the one tiktoken expects."""


class TokenCounter(Protocol):
    """Counts what a chat-completions request sends. `count` is the sum of `message` over the
    messages plus `tools` plus the reply priming, so callers may count message by message."""

    name: str  # "tiktoken:o200k_base", "estimate:cl100k_base*1.25": in `condensed` events

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int: ...

    def message(self, message: dict[str, Any]) -> int: ...

    def tools(self, tools: list[dict[str, Any]]) -> int: ...


def load_ranks(name: str) -> dict[bytes, int]:
    """The BPE ranks of encoding `name` from the package's files (`EncodingUnavailable` when a
    file is missing or its hash is not tiktoken's)."""
    if name not in ENCODING_FILES:
        raise EncodingUnavailable(f"no shipped encoding {name!r}")
    filename, expected = ENCODING_FILES[name]
    try:
        packed = resources.files("nexus_runner").joinpath("encodings", filename).read_bytes()
        data = gzip.decompress(packed)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise EncodingUnavailable(f"encoding {name}: cannot read {filename}: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise EncodingUnavailable(
            f"encoding {name}: {filename} has SHA-256 {digest}, not {expected}"
        )
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@cache
def encoding(name: str) -> tiktoken.Encoding:
    """Encoding `name`, built once per process from the shipped ranks (~0.2 s)."""
    return tiktoken.Encoding(
        name=name,
        pat_str=PATTERNS[name],
        mergeable_ranks=load_ranks(name),
        special_tokens=SPECIAL_TOKENS[name],
    )


class _Counter(abc.ABC):
    """The shared message arithmetic; subclasses say how many tokens a text is."""

    name = "abstract"

    def __init__(self) -> None:
        self._cache: OrderedDict[tuple[int, int], int] = OrderedDict()

    @abc.abstractmethod
    def _encode_len(self, text: str) -> int:
        """How many tokens `text` is (uncached)."""

    def text(self, text: str) -> int:
        if not text:
            return 0
        key = (hash(text), len(text))
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        n = self._encode_len(text)
        self._cache[key] = n
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return n

    def message(self, message: dict[str, Any]) -> int:
        n = PER_MESSAGE + self.text(str(message.get("role", "")))
        content = message.get("content")
        if isinstance(content, str):
            n += self.text(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    n += self.text(part["text"])
                else:
                    n += PER_IMAGE
        if isinstance(name := message.get("name"), str):
            n += PER_NAME + self.text(name)
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            n += PER_TOOL_CALL + self.text(str(function.get("name", "")))
            n += self.text(str(function.get("arguments", "")))
        if message.get("tool_call_id"):
            n += PER_TOOL_CALL_ID
        return n

    def tools(self, tools: list[dict[str, Any]]) -> int:
        # Providers render the schemas their own way (OpenAI: a TypeScript-like namespace in
        # the system prompt); compact JSON is close and, with its quotes and braces, no less.
        if not tools:
            return 0
        return self.text(json.dumps(tools, sort_keys=True, separators=(",", ":")))

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        return sum(self.message(m) for m in messages) + self.tools(tools) + REPLY_PRIMING


class TiktokenCounter(_Counter):
    """Exact text counts with one of the shipped OpenAI encodings."""

    def __init__(self, encoding_name: str) -> None:
        super().__init__()
        self.encoding = encoding(encoding_name)
        self.name = f"tiktoken:{encoding_name}"

    def _encode_len(self, text: str) -> int:
        # Ordinary: a tool output that contains "<|endoftext|>" is text, not a special token
        # (tiktoken's `encode` would refuse it).
        return len(self.encoding.encode_ordinary(text))


class EstimateCounter(_Counter):
    """For models whose tokenizer is not shipped: `ESTIMATE_ENCODING`'s count, scaled up."""

    name = f"estimate:{ESTIMATE_ENCODING}*{ESTIMATE_FACTOR}"

    def __init__(self) -> None:
        super().__init__()
        self.encoding = encoding(ESTIMATE_ENCODING)

    def _encode_len(self, text: str) -> int:
        return math.ceil(len(self.encoding.encode_ordinary(text)) * ESTIMATE_FACTOR)


class ByteCounter(_Counter):
    """The last resort when no encoding loads: UTF-8 bytes over `BYTES_PER_TOKEN`."""

    name = f"estimate:utf8/{BYTES_PER_TOKEN}"

    def _encode_len(self, text: str) -> int:
        return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN)


@cache
def _counter(encoding_name: str | None) -> _Counter:
    # One per encoding per process, so its cache of counted texts lives across turns.
    try:
        return EstimateCounter() if encoding_name is None else TiktokenCounter(encoding_name)
    except EncodingUnavailable as exc:
        # A broken install must not stop runs: the byte estimate over-counts all but the
        # densest text.
        log.warning("token counts estimated from bytes: %s", exc)
        return ByteCounter()


def counter_for(model_name: str) -> TokenCounter:
    """The counter for `model_name`: its real tokenizer when known and shipped, else the
    estimate."""
    return _counter(encoding_for(model_name))
