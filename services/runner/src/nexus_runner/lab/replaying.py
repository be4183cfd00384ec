"""A replay's model client: serves the source run's recorded replies while the requests match
the recorded ones; at the first divergence publishes ``diverged`` and stops the run or hands
this call and every later one to the live model."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from nexus_events.events.lab_specs import OnDivergence
from nexus_events.events.runs import RunConfig

from nexus_runner.errors import RunnerError
from nexus_runner.lab.divergence import (
    Divergence,
    config_divergence,
    message_divergence,
    recording_ended,
)
from nexus_runner.lab.normalising import Normaliser
from nexus_runner.lab.recording import RecordedCall, SourceRun
from nexus_runner.llm import Completion, DeltaSink, LlmClient, RetryPolicy, ToolCallRequest
from nexus_runner.publisher import RunPublisher


class ReplayStoppedError(RunnerError):
    """A replay diverged and its policy is `stop`: the run ends completed, reason diverged."""

    def __init__(self, turn: int, divergence: Divergence) -> None:
        self.turn = turn
        self.divergence = divergence
        self.summary = (
            f"replay stopped at its first divergence: turn {turn}, {divergence.kind}"
            f" ({divergence.detail})"
        )
        super().__init__(self.summary)


def served(call: RecordedCall) -> Completion:
    """The recorded reply as a completion: the same text and tool calls (their recorded ids),
    no tokens and no cost, marked replayed."""
    reply = call.reply
    calls = [
        ToolCallRequest(
            str(raw.get("id", "")),
            str((raw.get("function") or {}).get("name", "")),
            str((raw.get("function") or {}).get("arguments", "")),
        )
        for raw in reply.get("tool_calls") or []
    ]
    return Completion(
        text=str(reply.get("content") or ""),
        tool_calls=calls,
        finish_reason="tool_calls" if calls else "stop",
        replayed=True,
    )


class ReplayingLlm:
    """`LlmClient.complete`'s shape over a recording; `live` answers once it diverged."""

    def __init__(
        self,
        live: LlmClient,
        source: SourceRun,
        config: RunConfig,
        normaliser: Normaliser,
        pub: RunPublisher,
        *,
        calls: int = 0,
    ) -> None:
        assert config.lab is not None
        self.live = live
        self.source = source
        self.config = config
        self.on_divergence = config.lab.on_divergence
        self.normaliser = normaliser
        self.pub = pub
        self.calls = calls  # model calls made so far (a resumed replay's carry over)
        self.diverged: Divergence | None = None

    @property
    def model(self) -> str:
        return self.live.model

    @property
    def retry(self) -> RetryPolicy:
        return self.live.retry

    def _divergence(self, turn: int, messages: list[dict[str, Any]]) -> Divergence | None:
        if turn == 1 and (found := config_divergence(self.source.config, self.config)):
            return found
        if turn > len(self.source.calls):
            return recording_ended(turn, len(self.source.calls))
        recorded = self.source.calls[turn - 1].request
        return message_divergence(recorded, messages, self.normaliser)

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_delta: DeltaSink,
        on_retry: Callable[[int, float, str], Awaitable[None]] | None = None,
        ready: Callable[[], Awaitable[None]] | None = None,
    ) -> Completion:
        self.calls += 1
        if self.diverged is None:
            turn = self.calls
            found = self._divergence(turn, messages)
            if found is None:
                if ready is not None:  # no call, but the same write-ahead as a live turn
                    await ready()
                completion = served(self.source.calls[turn - 1])
                if completion.text:
                    await on_delta("llm_text", completion.text)
                return completion
            self.diverged = found
            await self.pub.event(found.event(turn, self.on_divergence))
            if self.on_divergence is OnDivergence.STOP:
                raise ReplayStoppedError(turn, found)
        return await self.live.complete(messages, tools, on_delta, on_retry, ready)


__all__ = ["ReplayStoppedError", "ReplayingLlm", "served"]
