"""What the runner knows of common models: their tokenizer (when it ships with the runner) and
their context window, for agents that do not set `model.context_tokens`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KnownModel:
    prefix: str  # matched against the model name, lower case, without a provider path
    window: int  # context window in tokens (prompt + reply)
    encoding: str | None  # shipped tiktoken encoding; None = estimated


# First match wins, so longer prefixes come before the shorter ones they start with. Windows
# are the providers' published ones; for open-weight families, the usual served length.
KNOWN_MODELS: tuple[KnownModel, ...] = (
    KnownModel("gpt-5", 400_000, "o200k_base"),
    KnownModel("gpt-4.1", 1_047_576, "o200k_base"),
    KnownModel("gpt-4.5", 128_000, "o200k_base"),
    KnownModel("gpt-4o", 128_000, "o200k_base"),
    KnownModel("chatgpt-4o", 128_000, "o200k_base"),
    KnownModel("gpt-oss", 131_072, "o200k_base"),
    KnownModel("o1-mini", 128_000, "o200k_base"),
    KnownModel("o1", 200_000, "o200k_base"),
    KnownModel("o3", 200_000, "o200k_base"),
    KnownModel("o4-mini", 200_000, "o200k_base"),
    KnownModel("gpt-4-turbo", 128_000, "cl100k_base"),
    KnownModel("gpt-4-32k", 32_768, "cl100k_base"),
    KnownModel("gpt-4", 8_192, "cl100k_base"),
    KnownModel("gpt-3.5-turbo", 16_385, "cl100k_base"),
    KnownModel("claude", 200_000, None),
    KnownModel("gemini", 1_048_576, None),
    KnownModel("llama-3.", 128_000, None),  # 3.1 and later; 3.0 had 8k
    KnownModel("llama3.", 128_000, None),
    KnownModel("meta-llama-3.", 128_000, None),
    KnownModel("llama3", 8_192, None),
    KnownModel("llama-3", 8_192, None),
    KnownModel("meta-llama-3", 8_192, None),
    KnownModel("qwen", 32_768, None),
    KnownModel("mistral", 32_768, None),
    KnownModel("mixtral", 32_768, None),
    KnownModel("deepseek", 64_000, None),
)


def known_model(model_name: str) -> KnownModel | None:
    """The entry for `model_name` ("gpt-4o-mini", "openai/gpt-4o", "Qwen/Qwen2.5-7B"), or
    None. A provider or organisation path before the last `/` is ignored."""
    base = model_name.rsplit("/", 1)[-1].strip().lower()
    for model in KNOWN_MODELS:
        if base.startswith(model.prefix):
            return model
    return None


def encoding_for(model_name: str) -> str | None:
    model = known_model(model_name)
    return model.encoding if model is not None else None


def default_window(model_name: str) -> int | None:
    model = known_model(model_name)
    return model.window if model is not None else None
