"""Context management (nexus_runner.context, nexus_runner.tokens): budgets per model, offline
tokenizers, and condensations that keep a long run under its budget, replayable exactly."""

from __future__ import annotations

import base64
import copy
import json
import random
import socket
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import tiktoken_ext.openai_public as openai_public
from nexus_events.events.runs import Condensation, Reason
from nexus_events.events.specs import ModelSpec
from openai import AsyncOpenAI
from tests.fakes.openai_server import FakeOpenAI, Reply

from nexus_runner import tokens
from nexus_runner.config import RunnerSettings
from nexus_runner.context import (
    ELIDED,
    SUMMARY_HEADER,
    Condenser,
    ContextOverflow,
    Planned,
    Summariser,
    condenser_for,
    context_budget,
    counter_for,
    llm_summariser,
)
from nexus_runner.errors import LlmUnavailable, RunStopped
from nexus_runner.llm import RetryPolicy

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
WORDS = [
    "def",
    "return",
    "self",
    "import",
    "error",
    "file",
    "path",
    "the",
    "value",
    "=",
    "(",
    ")",
    ":",
    "result",
    "test_",
    "assert",
    "json",
    "{",
    "}",
    "for",
    "in",
    "if",
    "else",
    "raise",
    "None",
    "True",
    "False",
    "class",
    "async",
    "await",
]


def _output(seed: int, chars: int = 20_000) -> str:
    """A tool output of `chars` characters that tokenizes like code (about 4 chars a token)."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS) + ("\n" if rng.random() < 0.1 else " ")
        parts.append(word)
        size += len(word)
    return "".join(parts)[:chars]


def _turn(n: int, output: str | None) -> list[dict[str, Any]]:
    """Turn `n`: the assistant's message and, with `output`, one tool call and its result."""
    if output is None:
        return [
            {"role": "assistant", "content": f"Turn {n}: thinking it over."},
            {"role": "user", "content": "Continue with the task using the tools."},
        ]
    call = f"call_{n}"
    return [
        {
            "role": "assistant",
            "content": f"Turn {n}: reading the next file.",
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{n}"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call, "content": output},
    ]


def _start() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Task: refactor the parser and keep the tests green."},
    ]


def _conversation(turns: int, chars: int = 20_000) -> list[dict[str, Any]]:
    messages = _start()
    for n in range(1, turns + 1):
        messages += _turn(n, _output(n, chars))
    return messages


def _apply(messages: list[dict[str, Any]], plans: list[Planned]) -> list[dict[str, Any]]:
    for plan in plans:
        messages = plan.condensation.apply(messages)
    return messages


def _assert_paired(messages: list[dict[str, Any]]) -> None:
    """Every tool message answers a call of the assistant message just before its block, and
    every call is answered: what the chat-completions API demands."""
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message["role"] != "tool", f"orphan tool message at {i}"
        i += 1
        calls = [c["id"] for c in message.get("tool_calls") or []]
        answered = []
        while i < len(messages) and messages[i]["role"] == "tool":
            answered.append(messages[i]["tool_call_id"])
            i += 1
        assert answered == calls, f"calls {calls} answered by {answered}"


class FakeSummaries:
    """A deterministic stand-in for the model's summary: records what it was given."""

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []

    async def __call__(self, messages: list[dict[str, Any]]) -> tuple[str, int, int]:
        self.calls.append(messages)
        ids = [c["id"] for m in messages for c in m.get("tool_calls") or []]
        return f"Summary of {len(messages)} messages; calls {ids[0]}..{ids[-1]}.", 100, 20


# -- budgets and counters --------------------------------------------------------------------


def test_known_models_get_their_tokenizer_and_window_unknown_ones_the_estimate() -> None:
    settings = RunnerSettings(context_default_tokens=32_768, context_margin=0.05)
    assert counter_for("gpt-4o-mini").name == "tiktoken:o200k_base"
    assert counter_for("openai/gpt-4.1-mini").name == "tiktoken:o200k_base"
    assert counter_for("o3-mini").name == "tiktoken:o200k_base"
    assert counter_for("gpt-5").name == "tiktoken:o200k_base"
    assert counter_for("gpt-4-0613").name == "tiktoken:cl100k_base"
    assert counter_for("gpt-3.5-turbo").name == "tiktoken:cl100k_base"
    assert counter_for("claude-sonnet-4").name == "estimate:cl100k_base*1.25"
    assert counter_for("my-local-model").name == "estimate:cl100k_base*1.25"

    def budget(name: str, **kw: Any) -> int:
        return context_budget(ModelSpec(name=name, max_output_tokens=4096, **kw), settings)

    assert budget("gpt-4o") == 128_000 - 4096 - 6_400
    assert budget("gpt-4.1") == 1_047_576 - 4096 - 52_379
    assert budget("Qwen/Qwen2.5-Coder-7B") == 32_768 - 4096 - 1_639
    # Unknown: NEXUS_CONTEXT_DEFAULT_TOKENS; the agent's context_tokens overrides everything.
    assert budget("my-local-model") == 32_768 - 4096 - 1_639
    assert budget("gpt-4o", context_tokens=16_000) == 16_000 - 4096 - 800
    with pytest.raises(ContextOverflow, match="leaves no room"):
        budget("my-local-model", context_tokens=4_000)


def test_the_shipped_encodings_load_with_the_network_denied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def denied(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"network access: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", denied)
    monkeypatch.setattr(socket, "getaddrinfo", denied)
    monkeypatch.setattr(socket, "create_connection", denied)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    tokens.encoding.cache_clear()
    tokens._counter.cache_clear()
    try:
        assert tokens.encoding("o200k_base").encode("hello world") == [24912, 2375]
        assert tokens.encoding("cl100k_base").encode("hello world") == [15339, 1917]
        counter = counter_for("gpt-4o")
        assert counter.name == "tiktoken:o200k_base"
        # 3 per message + role + text, plus the reply's 3.
        assert counter.count([{"role": "user", "content": "hello world"}], []) == 3 + 1 + 2 + 3
    finally:
        tokens.encoding.cache_clear()
        tokens._counter.cache_clear()
    assert list(tmp_path.iterdir()) == []  # nothing went through tiktoken's download cache


def test_the_split_patterns_are_the_installed_tiktoken_ones() -> None:
    with mock.patch.object(openai_public, "load_tiktoken_bpe", return_value={}):
        for name in ("o200k_base", "cl100k_base"):
            upstream = getattr(openai_public, name)()
            assert upstream["pat_str"] == tokens.PATTERNS[name]
            assert upstream["special_tokens"] == tokens.SPECIAL_TOKENS[name]


def test_a_corrupt_encoding_file_is_refused_and_the_byte_estimate_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    filename, _ = tokens.ENCODING_FILES["cl100k_base"]
    monkeypatch.setitem(tokens.ENCODING_FILES, "cl100k_base", (filename, "0" * 64))
    with pytest.raises(tokens.EncodingUnavailable, match="SHA-256"):
        tokens.load_ranks("cl100k_base")

    def broken(name: str) -> Any:
        raise tokens.EncodingUnavailable(f"encoding {name}: corrupt")

    monkeypatch.setattr(tokens, "encoding", broken)
    tokens._counter.cache_clear()
    try:
        assert counter_for("gpt-4").name == "estimate:utf8/2"
        assert counter_for("my-local-model").name == "estimate:utf8/2"
        assert (
            counter_for("gpt-4").count([{"role": "user", "content": "x" * 100}], [])
            == 3 + 2 + 50 + 3
        )
    finally:
        tokens._counter.cache_clear()


def test_the_estimate_never_counts_fewer_tokens_than_the_real_tokenizers() -> None:
    samples = [
        "The quick brown fox jumps over the lazy dog. " * 50,
        _output(7, 5_000),
        json.dumps({"files": [{"path": f"src/m{i}.py", "lines": i * 7} for i in range(100)]}),
        "这是一个关于解析器重构的测试。" * 40,
        "Überprüfung der Änderungen: alle Tests bestanden. " * 40,
        "\n".join(f"{i:08x}  {i * 7919 % 65536:04x}" for i in range(300)),
        "Проверка изменений: все тесты прошли успешно. " * 40,
        base64.b64encode(random.Random(1).randbytes(3_000)).decode(),
        Path(tokens.__file__).read_text(encoding="utf-8"),
    ]
    estimate = counter_for("unknown-model")
    for text in samples:
        message = [{"role": "tool", "tool_call_id": "c", "content": text}]
        real = max(counter_for(m).count(message, TOOLS) for m in ("gpt-4o", "gpt-4"))
        # Above both, and not wildly: condensing far too early wastes the window.
        assert real <= estimate.count(message, TOOLS) <= 1.3 * real, text[:40]


def test_a_tool_output_with_special_token_text_is_counted_as_text() -> None:
    counter = counter_for("gpt-4o")
    assert counter.count([{"role": "tool", "content": "<|endoftext|> done"}], []) > 5


# -- condensing ------------------------------------------------------------------------------


async def test_under_budget_nothing_is_condensed() -> None:
    messages = _conversation(3, 2_000)
    counter = counter_for("gpt-4o")
    condenser = Condenser(counter, 100_000, keep_turns=3, summarise=None)
    assert await condenser.fit(messages, TOOLS) == []


async def test_old_tool_outputs_are_elided_first_oldest_first_and_only_as_many_as_needed() -> None:
    messages = _conversation(10, 4_000)
    counter = counter_for("gpt-4o")
    total = counter.count(messages, TOOLS)
    one = counter.message(messages[3])  # a tool output
    summaries = FakeSummaries()
    budget = total - one - one // 2  # needs two outputs gone, not three
    plans = await Condenser(counter, budget, keep_turns=3, summarise=summaries).fit(messages, TOOLS)
    assert summaries.calls == []
    [plan] = plans
    assert plan.condensation.strategy == "elide"
    assert plan.condensation.elided == [3, 5]  # the first two tool outputs, nothing else
    assert plan.condensation.placeholder == ELIDED
    after = _apply(messages, plans)
    assert after[3]["content"] == ELIDED.replace("{chars}", "4000")
    assert after[:3] == messages[:3]
    assert after[6:] == messages[6:]
    assert plan.tokens_before == total
    assert plan.tokens_after == counter.count(after, TOOLS) <= budget
    _assert_paired(after)


async def test_the_middle_is_summarised_when_eliding_cannot_reach_the_target() -> None:
    messages = _conversation(10, 4_000)
    for m in messages:  # the turns' own text outweighs their outputs: eliding is not enough
        if m["role"] == "assistant":
            m["content"] = _output(len(m["content"]), 6_000)
    counter = counter_for("gpt-4o")
    summaries = FakeSummaries()
    budget = counter.count(messages, TOOLS) // 2
    condenser = Condenser(counter, budget, keep_turns=3, summarise=summaries)
    plans = await condenser.fit(messages, TOOLS)
    [plan] = plans
    tail = len(messages) - 6  # three turns of assistant + tool
    assert plan.condensation.strategy == "summarise"
    assert (plan.condensation.start, plan.condensation.end) == (2, tail)
    assert summaries.calls == [messages[2:tail]]
    after = _apply(messages, plans)
    assert after[:2] == messages[:2]
    assert after[3:] == messages[tail:]
    assert after[2]["role"] == "user"
    assert after[2]["content"].startswith(SUMMARY_HEADER)
    assert "calls call_1..call_7" in after[2]["content"]
    assert plan.tokens_after == counter.count(after, TOOLS) <= condenser.target
    assert (plan.llm_tokens_in, plan.llm_tokens_out) == (100, 20)  # the summary's own call
    _assert_paired(after)


async def test_without_a_summariser_the_middle_then_the_kept_turns_are_elided() -> None:
    messages = _conversation(6, 8_000)
    counter = counter_for("gpt-4o")
    head = counter.count(messages[:2], TOOLS)
    one = counter.message(messages[3])
    # Room for the head and one and a half outputs: every output but the last must go.
    budget = head + 6 * counter.message(messages[2]) + one + one // 2
    plans = await Condenser(counter, budget, keep_turns=3, summarise=None).fit(messages, TOOLS)
    [plan] = plans
    assert plan.condensation.elided == [3, 5, 7, 9, 11]
    after = _apply(messages, plans)
    assert after[13] == messages[13]  # the last output survives
    assert plan.tokens_after == counter.count(after, TOOLS) <= budget
    _assert_paired(after)


async def test_a_huge_last_turn_is_elided_inside_the_kept_turns_after_summarising() -> None:
    messages = _conversation(8, 2_000)
    last = _turn(9, _output(99, 20_000))
    last[0]["tool_calls"].append(
        {"id": "call_9b", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    )
    last.append({"role": "tool", "tool_call_id": "call_9b", "content": _output(98, 20_000)})
    messages += last
    counter = counter_for("gpt-4o")
    summaries = FakeSummaries()
    budget = 7_000  # one 20 KB output fits, two do not
    condenser = Condenser(counter, budget, keep_turns=3, summarise=summaries)
    plans = await condenser.fit(messages, TOOLS)
    assert [p.condensation.strategy for p in plans] == ["summarise", "elide"]
    after = _apply(messages, plans)
    elided = [i for i, m in enumerate(after) if m.get("content", "").startswith(ELIDED[:20])]
    assert elided == plans[1].condensation.elided
    assert after[-1] == messages[-1]  # the newest output is the last to go, and stays
    assert after[-2]["content"] == ELIDED.replace("{chars}", "20000")
    assert plans[1].tokens_after == counter.count(after, TOOLS) <= budget
    _assert_paired(after)


async def test_a_conversation_that_cannot_fit_is_a_clear_failure() -> None:
    messages = _start()
    messages[1]["content"] = _output(1, 40_000)  # the task alone is over the budget
    messages += _turn(1, "ok")
    counter = counter_for("gpt-4o")
    condenser = Condenser(counter, 5_000, keep_turns=3, summarise=FakeSummaries())
    with pytest.raises(ContextOverflow, match="over the context budget of 5000") as caught:
        await condenser.fit(messages, TOOLS)
    assert isinstance(caught.value, RunStopped)
    assert caught.value.reason == Reason.BUDGET_EXCEEDED
    assert caught.value.detail["limit"] == 5_000


async def _verbose(middle: list[dict[str, Any]]) -> tuple[str, int, int]:
    return _output(5, 200_000), 1, 1


async def _down(middle: list[dict[str, Any]]) -> tuple[str, int, int]:
    raise LlmUnavailable("model refused the request: HTTP 400")


@pytest.mark.parametrize("summarise", [_verbose, _down], ids=["no-shorter", "failed"])
async def test_without_a_useful_summary_eliding_goes_on(summarise: Summariser) -> None:
    messages = _conversation(5, 3_000)
    counter = counter_for("gpt-4o")
    budget = counter.count(messages, TOOLS) - 500
    condenser = Condenser(counter, budget, keep_turns=3, summarise=summarise, target=1_000)
    plans = await condenser.fit(messages, TOOLS)
    [plan] = plans
    assert plan.condensation.strategy == "elide"
    # The whole middle (towards the target); the kept turns only as far as the budget needs.
    assert plan.condensation.elided == [3, 5]
    assert counter.count(_apply(messages, plans), TOOLS) <= budget


async def test_the_same_messages_give_the_same_plan() -> None:
    messages = _conversation(12, 6_000)
    counter = counter_for("gpt-4o")
    budget = counter.count(messages, TOOLS) // 3

    async def plan() -> list[Planned]:
        condenser = Condenser(counter, budget, keep_turns=3, summarise=FakeSummaries())
        return await condenser.fit(copy.deepcopy(messages), TOOLS)

    first, second = await plan(), await plan()
    assert first == second
    assert first


async def test_200_turns_of_20kb_outputs_stay_under_the_budget_and_replay_exactly() -> None:
    """The acceptance run, without the loop: each turn appends an assistant message and a
    20 KB tool output (every 17th turn a nudge instead), then fits before the next model call.
    Never over the budget, elision before any summary, calls always paired, and the recorded
    condensations (through JSON, as events) replayed over the appended messages give the very
    messages sent."""
    model = ModelSpec(name="gpt-4o", context_tokens=40_000, max_output_tokens=4_096)
    settings = RunnerSettings()
    budget = context_budget(model, settings)
    counter = counter_for(model.name)
    summaries = FakeSummaries()
    condenser = Condenser(
        counter,
        budget,
        keep_turns=settings.context_keep_turns,
        summarise=summaries,
        target=int(budget * settings.context_target),
    )
    messages = _start()
    log: list[tuple[str, Any]] = [("append", m) for m in messages]
    strategies: list[str] = []
    for n in range(1, 201):
        plans = await condenser.fit(messages, TOOLS)
        for plan in plans:
            before = messages
            messages = plan.condensation.apply(messages)
            assert plan.tokens_before == counter.count(before, TOOLS)
            assert plan.tokens_after == counter.count(messages, TOOLS)
            log.append(("condense", plan.condensation.model_dump_json()))
            strategies.append(plan.condensation.strategy)
        assert counter.count(messages, TOOLS) <= budget, f"turn {n}"
        _assert_paired(messages)
        assert messages[:2] == _start()
        new = _turn(n, None if n % 17 == 0 else _output(n))
        messages = messages + new
        log += [("append", m) for m in new]
    assert strategies[0] == "elide"
    assert "summarise" in strategies
    assert len(summaries.calls) == strategies.count("summarise")
    # Fewer condensations than turns: each one aims below the budget (context_target).
    assert len(strategies) < 100

    replayed: list[dict[str, Any]] = []
    for kind, item in log:
        if kind == "append":
            replayed.append(item)
        else:
            replayed = Condensation.model_validate_json(item).apply(replayed)
    assert replayed == messages


# -- the model's summary ---------------------------------------------------------------------


async def test_the_llm_summariser_asks_the_model_once_for_a_faithful_summary() -> None:
    middle = _conversation(4, 30_000)[2:]
    async with FakeOpenAI([Reply(text="  You read f1..f4.  ", prompt_tokens=900)]) as llm:
        async with AsyncOpenAI(api_key="x", base_url=llm.base_url, max_retries=0) as client:
            summarise = llm_summariser(
                client,
                ModelSpec(name="gpt-4o-mini"),
                retry=RetryPolicy(max_attempts=1, base_delay=0, max_delay=0),
                max_tokens=500,
            )
            assert await summarise(middle) == ("You read f1..f4.", 900, 5)
        [request] = llm.requests
    assert request["model"] == "gpt-4o-mini"
    assert request["max_tokens"] == 500
    assert request["temperature"] == 0
    assert not request.get("stream")
    system, user = request["messages"]
    assert system["role"] == "system"
    assert "faithful" in system["content"]
    # Each 30 KB output reaches the summariser shortened; every call is named.
    assert len(user["content"]) < 4 * 3_000
    assert all(f'[assistant calls read_file] {{"path": "f{n}"}}' in user["content"] for n in (1, 4))


async def test_the_runs_condenser_summarises_with_its_model() -> None:
    settings = RunnerSettings(context_keep_turns=2, context_target=0.5, context_summary_tokens=300)
    model = ModelSpec(name="gpt-4o-mini", context_tokens=30_000, max_output_tokens=2_000)
    messages = _conversation(10, 3_000)
    for m in messages:
        if m["role"] == "assistant":
            m["content"] = _output(len(m["content"]), 12_000)
    reply = Reply(text="You refactored f1..f4.", prompt_tokens=7_000, completion_tokens=40)
    async with FakeOpenAI([reply]) as llm:
        async with AsyncOpenAI(api_key="x", base_url=llm.base_url, max_retries=0) as client:
            condenser = await condenser_for(
                model, settings, client, RetryPolicy(max_attempts=1, base_delay=0, max_delay=0)
            )
            plans = await condenser.fit(messages, TOOLS)
        [request] = llm.requests
    assert condenser.budget == 30_000 - 2_000 - 1_500
    assert condenser.target == condenser.budget // 2
    assert condenser.counter.name == "tiktoken:o200k_base"
    assert request["max_tokens"] == 300
    [plan] = plans
    assert plan.condensation.summary == SUMMARY_HEADER + "You refactored f1..f4."
    assert (plan.condensation.start, plan.condensation.end) == (2, len(messages) - 4)
    assert (plan.llm_tokens_in, plan.llm_tokens_out) == (7_000, 40)
    assert plan.tokens_after <= condenser.target


async def test_a_chat_conversation_and_its_new_message_stay_when_the_middle_is_summarised() -> None:
    """docs/channels.md, "Conversations": the run's own work is condensed; what was said
    before and the new message (the run's task) are kept verbatim."""
    said = [
        {"role": "user", "content": "my name is Ana"},
        {"role": "assistant", "content": "hello Ana"},
        {"role": "user", "content": "now refactor the parser"},
    ]
    messages = [_start()[0], *said]
    for n in range(1, 11):
        messages += _turn(n, _output(n, 4_000))
    for m in messages[4:]:
        if m["role"] == "assistant":
            m["content"] = _output(len(m["content"]), 6_000)
    counter = counter_for("gpt-4o")
    budget = counter.count(messages, TOOLS) // 2
    kept = Condenser(counter, budget, keep_turns=3, summarise=FakeSummaries(), head_messages=4)
    [plan] = await kept.fit(messages, TOOLS)
    assert plan.condensation.strategy == "summarise"
    assert plan.condensation.start == 4  # after the system, the conversation and the task
    assert _apply(messages, [plan])[:4] == messages[:4]
    # Without it the task would be in the summarised middle.
    loose = Condenser(counter, budget, keep_turns=3, summarise=FakeSummaries())
    [free] = await loose.fit(messages, TOOLS)
    assert free.condensation.start == 2
