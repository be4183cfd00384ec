"""Keeping a run's conversation inside the model's context budget (issue 24, docs/resume.md).

Before each model call the loop asks `Condenser.fit` for the condensations that bring the
messages under the budget, applies them in order with `Condensation.apply` and records each as
a `condensed` event, so a resume or a replay gets the very same messages.

What is always kept: the system prompt, the task (the first user message; in a chat
conversation's run, the conversation so far and the new message: `head_messages`) and the last
`keep_turns` turns. In order of preference:

1. elide old observations: tool outputs of the middle, oldest first, only as many as needed,
   become a placeholder saying how long they were (deterministic, no model call);
2. when that cannot reach the target, summarise the middle with the model: the range from
   after the task to the first kept turn becomes one user message. Its ends are turn
   boundaries, so an assistant message never loses its tool messages (the API refuses those);
3. when even that is too much (a huge last turn), elide inside the kept turns too, oldest
   first, rather than send more than the budget; when nothing is left to remove,
   `ContextOverflow`.

A condensation aims below the budget (`target`), so that the next turns do not condense again
at once. Everything but the summary's text is a function of the messages: same messages, same
plan."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nexus_events.contract.runstate import RunStatus
from nexus_events.events.runs import Condensation, Reason
from nexus_events.events.specs import ModelSpec
from openai import AsyncOpenAI

from nexus_runner.config import RunnerSettings
from nexus_runner.context_defaults import default_window
from nexus_runner.errors import LlmUnavailable, RunStopped
from nexus_runner.llm import CallGate, LlmClient, RetryPolicy
from nexus_runner.tokens import ESTIMATE_FACTOR, TokenCounter, counter_for

log = logging.getLogger(__name__)

__all__ = [
    "ELIDED",
    "SUMMARY_HEADER",
    "Condenser",
    "ContextOverflow",
    "Planned",
    "RunContext",
    "Summariser",
    "TokenCounter",
    "condenser_for",
    "context_budget",
    "counter_for",
    "llm_summariser",
]

ELIDED = (
    "[output of an earlier tool call elided to stay within the context budget: {chars} characters]"
)
_ELIDED_PREFIX = ELIDED.split("{chars}", 1)[0]
SUMMARY_HEADER = (
    "[summary of earlier turns of this conversation, condensed to stay within the context"
    " budget]\n\n"
)

# (messages to summarise) -> (summary, tokens_in, tokens_out)
Summariser = Callable[[list[dict[str, Any]]], Awaitable[tuple[str, int, int]]]


class ContextOverflow(RunStopped):
    """The messages cannot be brought under the budget: what is left cannot be removed (the
    system prompt and task alone, or a budget the model's reply already fills)."""

    def __init__(self, message: str, *, tokens: int, budget: int) -> None:
        super().__init__(
            RunStatus.FAILED,
            Reason.BUDGET_EXCEEDED,
            message,
            {"budget": "context_tokens", "limit": budget, "tokens": tokens},
        )
        self.tokens = tokens
        self.budget = budget


def context_budget(model: ModelSpec, settings: RunnerSettings) -> int:
    """Prompt tokens the runner may send `model`: its window (the agent's `context_tokens`, the
    known default for its name, else `context_default_tokens`) less the reply's
    `max_output_tokens` and the counting margin."""
    window = model.context_tokens or default_window(model.name) or settings.context_default_tokens
    budget = window - model.max_output_tokens - math.ceil(window * settings.context_margin)
    if budget <= 0:
        raise ContextOverflow(
            f"model {model.name}: max_output_tokens {model.max_output_tokens} leaves no room"
            f" for the prompt in a context window of {window} tokens",
            tokens=0,
            budget=max(budget, 0),
        )
    return budget


@dataclass(frozen=True)
class Planned:
    """One condensation to apply (in order) and the token counts around it. A summary's own
    model call is `llm_tokens_in`/`llm_tokens_out`: the run's budgets and cost count it."""

    condensation: Condensation
    tokens_before: int
    tokens_after: int
    llm_tokens_in: int = 0
    llm_tokens_out: int = 0


def _head_end(messages: list[dict[str, Any]]) -> int:
    """End of the part always kept at the start: the system prompt(s) and the task."""
    for i, message in enumerate(messages):
        if message.get("role") == "user":
            return i + 1
    i = 0
    while i < len(messages) and messages[i].get("role") == "system":
        i += 1
    return i


def _tail_start(messages: list[dict[str, Any]], head: int, keep_turns: int) -> int:
    """Start of the last `keep_turns` turns (a turn starts at an assistant message, which is
    always a boundary: its tool messages follow it)."""
    starts = [i for i in range(head, len(messages)) if messages[i].get("role") == "assistant"]
    if len(starts) <= keep_turns:
        return head
    return starts[-keep_turns]


def _elidable(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message.get("role") == "tool"
        and isinstance(content, str)
        and not content.startswith(_ELIDED_PREFIX)
    )


def _elided(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    chars = len(content) if isinstance(content, str) else 0
    return {**message, "content": ELIDED.replace("{chars}", str(chars))}


class Condenser:
    """Plans the condensations that bring a conversation under `budget` tokens."""

    def __init__(
        self,
        counter: TokenCounter,
        budget: int,
        *,
        keep_turns: int,
        summarise: Summariser | None,
        target: int | None = None,
        head_messages: int = 0,
    ) -> None:
        if budget <= 0 or keep_turns < 1:
            raise ValueError("budget and keep_turns must be positive")
        self.counter = counter
        self.budget = budget
        self.target = budget if target is None else max(1, min(target, budget))
        self.keep_turns = keep_turns
        self.summarise = summarise
        # The messages the run began with that are always kept (a conversation's: the gateway
        # bounds them, docs/channels.md), beside the system prompt and the first user message.
        self.head_messages = head_messages

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        return self.counter.count(messages, tools)

    async def fit(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> list[Planned]:
        """The condensations to apply in order (`[]` when the messages fit). Raises
        `ContextOverflow` when no plan fits (a summary that failed is done without)."""
        sizes = [self.counter.message(m) for m in messages]
        fixed = self.counter.count([], tools)
        total = fixed + sum(sizes)
        if total <= self.budget:
            return []
        head = min(max(_head_end(messages), self.head_messages), len(messages))
        tail = _tail_start(messages, head, self.keep_turns)
        plans: list[Planned] = []
        elide = self._elide(
            messages, sizes, range(head, tail), total=total, goal=self.target, chosen=[]
        )
        if elide is not None and elide.tokens_after <= self.target:
            return [elide]
        if self.summarise is not None:
            start = head
            while start < tail and messages[start].get("role") == "tool":
                start += 1  # never cut a tool message from its call
            if start < tail:
                summarised = await self._summarise(messages, sizes, start, tail, total)
                if summarised is not None:
                    plan, messages, sizes = summarised
                    plans.append(plan)
                    total = plan.tokens_after
                    tail = start + 1
                    if total <= self.target:
                        return plans
        # Last resort: the middle (when it could not be summarised) down to the target, then
        # the kept turns, oldest first, only down to the budget.
        middle = [i for i in range(head, tail) if _elidable(messages[i])]
        kept = [i for i in range(tail, len(messages)) if _elidable(messages[i])]
        chosen: list[int] = []
        last = self._elide(messages, sizes, middle, total=total, goal=self.target, chosen=chosen)
        after = last.tokens_after if last is not None else total
        if after > self.budget:
            last = self._elide(messages, sizes, kept, total=total, goal=self.budget, chosen=chosen)
            after = last.tokens_after if last is not None else total
        if last is not None:
            plans.append(last)
        if after > self.budget:
            raise ContextOverflow(
                f"the conversation needs {after} tokens after condensing, over the context"
                f" budget of {self.budget} ({self.counter.name}): what is left is the system"
                f" prompt, the task and the last {self.keep_turns} turns' calls",
                tokens=after,
                budget=self.budget,
            )
        return plans

    def _elide(
        self,
        messages: list[dict[str, Any]],
        sizes: list[int],
        candidates: range | list[int],
        *,
        total: int,
        goal: int,
        chosen: list[int],
    ) -> Planned | None:
        """Elide candidates oldest first until the total is at most `goal`. `chosen` carries
        indexes picked by an earlier call on the same messages (they go in the same
        condensation)."""
        after = total - sum(sizes[i] - self.counter.message(_elided(messages[i])) for i in chosen)
        for i in candidates:
            if after <= goal:
                break
            if i in chosen or not _elidable(messages[i]):
                continue
            gain = sizes[i] - self.counter.message(_elided(messages[i]))
            if gain > 0:
                chosen.append(i)
                after -= gain
        if not chosen:
            return None
        condensation = Condensation(strategy="elide", elided=sorted(chosen), placeholder=ELIDED)
        return Planned(condensation, total, after)

    async def _summarise(
        self,
        messages: list[dict[str, Any]],
        sizes: list[int],
        start: int,
        end: int,
        total: int,
    ) -> tuple[Planned, list[dict[str, Any]], list[int]] | None:
        if self.summarise is None:
            return None
        try:
            text, tokens_in, tokens_out = await self.summarise(messages[start:end])
        except LlmUnavailable as exc:
            # Eliding may still fit the budget; if the model is down, its next turn says so.
            log.warning("no summary of messages [%d, %d): %s", start, end, exc)
            return None
        condensation = Condensation(
            strategy="summarise", start=start, end=end, summary=SUMMARY_HEADER + text.strip()
        )
        after_messages = condensation.apply(messages)
        summary_size = self.counter.message(after_messages[start])
        after_sizes = [*sizes[:start], summary_size, *sizes[end:]]
        after = total - sum(sizes[start:end]) + summary_size
        if after >= total:
            # A summary no shorter than what it replaces is no condensation (its call is still
            # paid for; rare, as the summary's max_tokens is far below a middle worth it).
            return None
        plan = Planned(condensation, total, after, tokens_in, tokens_out)
        return plan, after_messages, after_sizes


SUMMARY_INSTRUCTIONS = """\
You condense the middle of an AI coding agent's conversation so that the agent can go on \
with its task within its context window. You get the turns to condense as a transcript: the \
agent's messages, the tool calls it made and (possibly shortened) tool outputs.

Write a faithful, dense summary for the agent itself, in the second person. Keep every fact \
it will need: what it did and why, files read or changed (paths), commands run and their \
results, errors met and how they were resolved, decisions, what remains to do, and any \
instruction from a person. Do not invent anything; say when something is unknown. Answer \
with the summary only."""

_TOOL_OUTPUT_CHARS = 2_000
_ARGUMENT_CHARS = 1_000


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"


def render_transcript(messages: list[dict[str, Any]], max_chars: int) -> str:
    """The messages as a plain transcript for the summariser, each tool output and argument
    shortened, the whole at most about `max_chars` (its middle left out)."""
    lines: list[str] = []
    for message in messages:
        role = str(message.get("role", "?"))
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if role == "tool":
            lines.append(f"[tool output]\n{_shorten(str(content or ''), _TOOL_OUTPUT_CHARS)}")
            continue
        if content:
            lines.append(f"[{role}]\n{content}")
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments = _shorten(str(function.get("arguments", "")), _ARGUMENT_CHARS)
            lines.append(f"[{role} calls {function.get('name', '?')}] {arguments}")
    return _shorten("\n\n".join(lines), max_chars)


def llm_summariser(
    client: AsyncOpenAI,
    model: ModelSpec,
    *,
    retry: RetryPolicy,
    max_tokens: int = 2_000,
    input_tokens: int | None = None,
    before_call: CallGate | None = None,
) -> Summariser:
    """A `Summariser` that asks `model` (one non-streaming call, retried like a turn) for a
    faithful summary. The transcript it sends is cut to about `input_tokens` (default: what
    the model's window leaves after the reply)."""
    window = model.context_tokens or default_window(model.name) or 32_768
    budget = input_tokens if input_tokens is not None else window - max_tokens - 1_000
    # Dense text (JSON, logs) runs to 2.5 bytes a token: cut at that, not at 4.
    max_chars = max(budget, 1_000) * 5 // 2
    llm = LlmClient(
        client,
        model.name,
        temperature=0.0,
        max_output_tokens=max_tokens,
        retry=retry,
        stream=False,
        before_call=before_call,  # the summary's call is reserved like a turn's
    )

    async def no_deltas(kind: str, text: str) -> None:
        return None

    async def summarise(messages: list[dict[str, Any]]) -> tuple[str, int, int]:
        request = [
            {"role": "system", "content": SUMMARY_INSTRUCTIONS},
            {"role": "user", "content": render_transcript(messages, max_chars)},
        ]
        completion = await llm.complete(request, [], no_deltas)
        summary = completion.text.strip()
        if not summary:
            raise LlmUnavailable("the model returned an empty summary of the conversation")
        return summary, completion.tokens_in, completion.tokens_out

    return summarise


async def condenser_for(
    model: ModelSpec,
    settings: RunnerSettings,
    client: AsyncOpenAI,
    retry: RetryPolicy,
    before_call: CallGate | None = None,
    *,
    head_messages: int = 0,
) -> Condenser:
    """The run's condenser, from its model and the runner's settings. The tokenizer is loaded
    in a thread (about 0.3-1 s the first time in a process): the event loop keeps beating."""
    budget = context_budget(model, settings)
    counter = await asyncio.to_thread(counter_for, model.name)
    summarise = llm_summariser(
        client,
        model,
        retry=retry,
        max_tokens=settings.context_summary_tokens,
        before_call=before_call,
    )
    return Condenser(
        counter,
        budget,
        keep_turns=settings.context_keep_turns,
        summarise=summarise,
        target=int(budget * settings.context_target),
        head_messages=head_messages,
    )


def upper_bound(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    """Tokens the messages and tools cannot exceed by any counter here: a byte-level BPE token
    is at least one byte, the JSON around each message is longer than its token overhead, and
    the estimate scales a real count by `ESTIMATE_FACTOR`."""
    size = len(json.dumps(messages, ensure_ascii=False).encode())
    size += len(json.dumps(tools, ensure_ascii=False).encode())
    return math.ceil(size * ESTIMATE_FACTOR)


class RunContext:
    """A run's context budget, with the condenser made only once a conversation could pass it:
    most runs never come near, and loading a tokenizer costs 0.3-1 s of CPU per runner."""

    def __init__(self, budget: int, make: Callable[[], Awaitable[Condenser]]) -> None:
        self.budget = budget
        self._make = make
        self.condenser: Condenser | None = None

    @classmethod
    def of(
        cls,
        model: ModelSpec,
        settings: RunnerSettings,
        client: AsyncOpenAI,
        retry: RetryPolicy,
        before_call: CallGate | None = None,
        *,
        head_messages: int = 0,
    ) -> RunContext:
        return cls(
            context_budget(model, settings),
            lambda: condenser_for(
                model, settings, client, retry, before_call, head_messages=head_messages
            ),
        )

    @property
    def counter_name(self) -> str:
        return self.condenser.counter.name if self.condenser is not None else "bytes"

    async def fit(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> list[Planned]:
        """`Condenser.fit`, or `[]` at once while the messages are surely under the budget."""
        if self.condenser is None:
            if upper_bound(messages, tools) <= self.budget:
                return []
            self.condenser = await self._make()
        return await self.condenser.fit(messages, tools)
