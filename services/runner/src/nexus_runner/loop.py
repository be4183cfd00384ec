"""The agent loop: model turn -> tool calls (judged, approved, run) -> next turn, until
`finish`, a budget, a stuck loop or a stop from outside."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import nats.errors
from nexus_events.contract.runstate import RunStatus
from nexus_events.contract.spans import OUTCOME
from nexus_events.errors import BusError
from nexus_events.events.runs import (
    ApprovalDecided,
    ApprovalRequested,
    Reason,
    RunCondensed,
    RunConfig,
    RunTurn,
    ToolCalled,
    ToolResult,
)
from nexus_events.runtime.clock import SYSTEM_CLOCK, Clock
from opentelemetry import trace

from nexus_runner.approval_text import call_summary
from nexus_runner.budget import StuckDetector, Usage, exceeded, turn_cost
from nexus_runner.checkpoint import Checkpointer
from nexus_runner.config import RunnerSettings
from nexus_runner.context import RunContext
from nexus_runner.control import RunControl
from nexus_runner.errors import LlmUnavailable, RunnerError, RunStopped, ToolError
from nexus_runner.guard.verdict import Outcome
from nexus_runner.llm import Completion, ModelClient, ToolCallRequest
from nexus_runner.output import TypedOutput
from nexus_runner.plan import (
    EXIT_PLAN_MODE,
    READ_TOOLS,
    ExitPlanModeArgs,
    PlanMode,
    PlanVerdict,
    Verdict,
    approval_summary,
    approved_output,
    not_approved_output,
)
from nexus_runner.prompt import inbox_message
from nexus_runner.publisher import RunPublisher
from nexus_runner.resume import PendingCall, interrupted_note
from nexus_runner.safety import redact, truncate
from nexus_runner.tools import Decision, ToolOutcome, ToolRegistry
from nexus_runner.tools.args import FinishArgs
from nexus_runner.tools.builtin import FINISHED
from nexus_runner.tools.sleep import SLEEP, SleepPlan
from nexus_runner.tracing import (
    APPROVAL,
    COST_USD,
    FINISH_REASONS,
    INPUT_TOKENS,
    LLM_ATTEMPTS,
    OUTPUT_TOKENS,
    RESPONSE_MODEL,
    TOOL_ERROR,
    TOOL_OK,
    TOOL_REFUSED,
    llm_span,
    tool_span,
)
from nexus_runner.transcript import TranscriptWriter
from nexus_runner.waking import wake_message

NUDGE = "Continue with the task using the tools, or call `finish` with a summary when done."


# Built-ins that never change the workspace: no checkpoint check after them (it costs two git
# processes). Every other call is checked, since a command or MCP tool may write.
UNWRITING_TOOLS = READ_TOOLS | {"finish", EXIT_PLAN_MODE, SLEEP}
# The answer to a call the model made after an accepted `sleep` in the same turn.
NOT_RUN_ASLEEP = (
    "not run: you went to sleep earlier in this turn, so this call was not run; call it again"
    " after you wake if it is still needed"
)


def _answerless(message: dict[str, Any]) -> bool:
    return message.get("role") == "assistant" and not message.get("tool_calls")


def _finished_before(messages: list[dict[str, Any]]) -> FinishArgs | None:
    """The arguments of a `finish` the conversation already answered as accepted (its last
    assistant message's call, followed by its "run finished" tool message), else None."""
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    if last is None:
        return None
    after = messages[messages.index(last) + 1 :]
    if any(m.get("role") != "tool" for m in after):
        return None  # something came after the finish (a fork's input): the run goes on
    answers = {m.get("tool_call_id"): m.get("content") for m in after}
    for call in last.get("tool_calls") or []:
        function = call.get("function") or {}
        if function.get("name") == "finish" and answers.get(call.get("id")) == FINISHED:
            try:
                return FinishArgs.model_validate_json(function.get("arguments") or "{}")
            except ValueError:
                return None
    return None


def _tool_message(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


class AgentLoop:
    """Drives one run's conversation. `run` returns the finish arguments, or the sleep the
    model took (the attempt then ends to sleep), or raises `RunStopped` (failed/cancelled
    with a reason)."""

    def __init__(  # noqa: PLR0917
        self,
        config: RunConfig,
        settings: RunnerSettings,
        llm: ModelClient,
        tools: ToolRegistry,
        control: RunControl,
        publisher: RunPublisher,
        messages: list[dict[str, Any]],
        typed: TypedOutput | None = None,
        *,
        transcript: TranscriptWriter | None = None,
        checkpointer: Checkpointer | None = None,
        recorded: int = 0,
        context: RunContext | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        self.llm = llm
        self.tools = tools
        self.control = control
        self.pub = publisher
        self.messages = messages
        self.usage = Usage()
        self.phase = "starting"
        self.stuck = StuckDetector(settings.stuck_repeat_threshold, settings.stuck_idle_turns)
        # Plan mode (nexus_runner.plan): read tools only until a submitted plan is approved.
        self.plan = PlanMode(config.plan_mode)
        self._tool_specs = self._offered()
        self._log_buffer: dict[str, str] = {}
        # The agent's output_schema, checked on `finish` (None: any details go).
        self.typed = typed
        # Write-ahead transcript (nexus_runner.transcript): every message added is written,
        # and stored before the model call that sends it. `recorded`: how many of `messages`
        # are in it already (a resumed attempt's restored ones).
        self.transcript = transcript
        self._recorded = recorded
        self.checkpointer = checkpointer
        # A resumed attempt: the calls its predecessor left unanswered (nexus_runner.resume).
        self.pending: list[PendingCall] = []
        self.transcript_wait = 0.0  # seconds spent waiting for transcript acks before calls
        # The context budget (nexus_runner.context): condensed before a call that would pass it.
        self.context = context
        # What the wake note (nexus_runner.waking) says the time is.
        self.clock: Clock = SYSTEM_CLOCK

    async def add(self, message: dict[str, Any], inbox_seq: int | None = None) -> None:
        """Add a message to the conversation and to the transcript (written ahead)."""
        self.messages.append(message)
        if self.transcript is not None:
            await self.transcript.message(message, inbox_seq)
        self._recorded = len(self.messages)

    async def _record_restored(self) -> None:
        """Write the messages the loop was given that the transcript does not hold yet."""
        if self.transcript is None:
            return
        for message in self.messages[self._recorded :]:
            await self.transcript.message(message)
        self._recorded = len(self.messages)

    async def _resume_calls(self) -> FinishArgs | None:
        """Answer the calls the dead attempt left open: run again those that are safe to, tell
        the model about the others; the finish arguments if `finish` was among them."""
        turn = max(self.usage.turns, 1)
        pending, self.pending = self.pending, []
        for item in pending:
            if item.rerun:
                await self._tool_call(turn, item.call)
            else:
                await self.add(_tool_message(item.call.id, interrupted_note(item)))
        return self.tools.ctx.finished

    async def _go_on(self) -> FinishArgs | None:
        """Before the first turn of this attempt: what the earlier attempts left to do (the
        transcript written, a nudge, the calls left open, the wake note); the finish
        arguments if the run was already finished."""
        await self._record_restored()
        if self.messages and _answerless(self.messages[-1]):
            # The dead attempt got a reply without calls and was lost before nudging.
            await self.add({"role": "user", "content": NUDGE})
        if self.pending and (finished := await self._resume_calls()) is not None:
            return finished
        if (finished := _finished_before(self.messages)) is not None:
            # The dead attempt's `finish` was answered, then it was lost (while finishing):
            # its result stands; asking the model again would make one up.
            return finished
        woke = wake_message(self.messages, self.config.wake, self.clock.now())
        if woke is not None and self.config.attempt > 1:
            # After a sleep: why it woke, once (in the transcript, so a later resume sees it).
            # Only a later attempt has slept; a fork (attempt 1) from a sleeping turn has not.
            await self.add(woke)
        return None

    async def run(self) -> FinishArgs | SleepPlan:
        if (finished := await self._go_on()) is not None:
            return finished
        while True:
            self._check_budgets(next_turn=True)
            self._check_cancel()
            self.plan.next_turn()
            for message in self.control.take_messages():
                await self.add(inbox_message(message), self.control.inbox_seq(message))
            self.usage.turns += 1
            turn = self.usage.turns
            completion = await self._model_turn(turn)
            await self.add(completion.assistant_message())
            self._check_budgets(next_turn=False)
            if not completion.tool_calls:
                self._stuck(self.stuck.record_turn([]))
                await self.add({"role": "user", "content": NUDGE})
                continue
            signatures = []
            for call in completion.tool_calls:
                self._check_cancel()
                if self.tools.ctx.slept is not None:
                    await self._not_run(turn, call, NOT_RUN_ASLEEP)
                    continue
                outcome = await self._tool_call(turn, call)  # its tool message added
                signatures.append((call.name, call.arguments, outcome.output))
                if self.typed is not None and self.typed.exhausted:
                    raise self.typed.failure()
                if (ended := self.plan.ended) is not None:
                    # Not approved: the plan is the result (app.py skips the finishing).
                    return FinishArgs(summary=ended.plan, details={"plan": ended.as_dict()})
                self._stuck(self.stuck.record_call(call.name, call.arguments, outcome.output))
            if self.tools.ctx.finished is not None:
                return self.tools.ctx.finished
            if self.tools.ctx.slept is not None:
                return self.tools.ctx.slept
            self._stuck(self.stuck.record_turn(signatures))

    # -- checks ------------------------------------------------------------------------------

    def _check_budgets(self, *, next_turn: bool) -> None:
        budget = exceeded(self.config.budgets, self.usage, next_turn=next_turn)
        if budget is not None:
            limit = getattr(self.config.budgets, budget)
            raise RunStopped(
                RunStatus.FAILED,
                Reason.BUDGET_EXCEEDED,
                f"budget {budget} exceeded (limit {limit})",
                {"budget": budget, "limit": limit},
            )

    def _check_cancel(self) -> None:
        self.control.stop_if_cancelled()

    def _stuck(self, why: str | None) -> None:
        if why is not None:
            raise RunStopped(RunStatus.FAILED, Reason.STUCK, why, {"why": why})

    # -- model -------------------------------------------------------------------------------

    async def _model_turn(self, turn: int) -> Completion:
        self.phase = "thinking"

        async def on_delta(kind: str, text: str) -> None:
            buffered = self._log_buffer.get(kind, "") + text
            if len(buffered) >= self.settings.log_chunk_chars:
                await self.pub.log(kind, buffered, turn)
                buffered = ""
            self._log_buffer[kind] = buffered

        async def on_retry(attempt: int, delay: float, error: str) -> None:
            await self.pub.log("runner", f"model call failed ({error}); retry in {delay:.1f}s")

        with llm_span(self.config, self.llm.model, turn) as span:
            try:
                # Re-read each turn: MCP tools of a server that kept crashing are withdrawn.
                self._tool_specs = self._offered()
                await self._fit_context(turn)
                # Write-ahead: what this call sends is stored before it is sent (the client
                # waits for it at the same time as the call's reservation).
                ready = self._flush_transcript if self.transcript is not None else None
                completion = await self.llm.complete(
                    self.messages, self._tool_specs, on_delta, on_retry, ready
                )
            except LlmUnavailable as exc:
                raise RunStopped(RunStatus.FAILED, Reason.LLM_UNAVAILABLE, str(exc)) from exc
            for kind, rest in self._log_buffer.items():
                if rest:
                    await self.pub.log(kind, rest, turn)
            self._log_buffer.clear()
            model = completion.model or self.llm.model
            cost = turn_cost(self.settings.prices, self.llm.model, *self._tokens(completion))
            span.set_attributes(
                {
                    RESPONSE_MODEL: model,
                    INPUT_TOKENS: completion.tokens_in,
                    OUTPUT_TOKENS: completion.tokens_out,
                    FINISH_REASONS: [completion.finish_reason or "unknown"],
                    COST_USD: cost,
                    LLM_ATTEMPTS: completion.attempts,
                }
            )
            self.usage.tokens_in += completion.tokens_in
            self.usage.tokens_out += completion.tokens_out
            self.usage.cost_usd += cost
            await self.pub.event(
                RunTurn(
                    turn=turn,
                    model=model,
                    tokens_in=completion.tokens_in,
                    tokens_out=completion.tokens_out,
                    cost_usd=cost,
                    finish_reason=completion.finish_reason,
                    duration_ms=completion.duration_ms,
                    replayed=completion.replayed,
                )
            )
        return completion

    async def _flush_transcript(self) -> None:
        assert self.transcript is not None
        waited = time.monotonic()
        await self.transcript.flush()
        self.transcript_wait += time.monotonic() - waited

    async def _fit_context(self, turn: int) -> None:
        """Condense the conversation when this call would pass the context budget: each
        condensation is applied, written to the transcript and recorded as a `condensed` event
        (a summary's own model call counts in the budgets and the cost)."""
        if self.context is None:
            return
        for plan in await self.context.fit(self.messages, self._tool_specs):
            # In place: the caller holds this list.
            self.messages[:] = plan.condensation.apply(self.messages)
            if self.transcript is not None:
                await self.transcript.condense(plan.condensation)
            self._recorded = len(self.messages)
            cost = turn_cost(
                self.settings.prices, self.llm.model, plan.llm_tokens_in, plan.llm_tokens_out
            )
            self.usage.tokens_in += plan.llm_tokens_in
            self.usage.tokens_out += plan.llm_tokens_out
            self.usage.cost_usd += cost
            await self.pub.event(
                RunCondensed(
                    turn=turn,
                    tokens_before=plan.tokens_before,
                    tokens_after=plan.tokens_after,
                    budget=self.context.budget,
                    counter=self.context.counter_name,
                    condensation=plan.condensation,
                    # The summary's own call: the spend service settles it from here.
                    llm_tokens_in=plan.llm_tokens_in,
                    llm_tokens_out=plan.llm_tokens_out,
                    cost_usd=cost,
                )
            )

    @staticmethod
    def _tokens(completion: Completion) -> tuple[int, int]:
        return completion.tokens_in, completion.tokens_out

    # -- tools -------------------------------------------------------------------------------

    def _offered(self) -> list[dict[str, Any]]:
        """The tools offered this turn: in plan mode only those that read, and exit_plan_mode."""
        return self.tools.specs(read_only=self.plan.active) + self.plan.specs()

    def _event_args(self, decision: Decision) -> dict[str, Any]:
        """Arguments as recorded in events: strings redacted and cut, big values summarised."""
        cap = self.settings.event_output_cap
        out: dict[str, Any] = {}
        for key, value in decision.raw.items():
            if isinstance(value, str):
                out[key] = truncate(redact(value), cap)[0]
            elif len(text := json.dumps(value)) > cap:
                out[key] = truncate(redact(text), cap)[0]
            else:
                out[key] = value
        return out

    async def _tool_call(self, turn: int, call: ToolCallRequest) -> ToolOutcome:
        with tool_span(self.config, call.name, call.id, turn) as span:
            outcome, label = await self._tool_call_traced(turn, call)
            span.set_attribute(OUTCOME, label)
            return outcome

    async def _tool_call_traced(self, turn: int, call: ToolCallRequest) -> tuple[ToolOutcome, str]:
        """Run one call; return its outcome for the model and a label (ok/refused/error)."""
        self.phase = f"tool:{call.name}"
        decision = self.tools.decide(call.name, call.arguments, call.id, plan_mode=self.plan.active)
        refused = decision.action is Outcome.REFUSE
        await self.pub.event(
            ToolCalled(
                turn=turn,
                call_id=call.id,
                tool=call.name,
                arguments=self._event_args(decision),
                refused=refused,
                refusal_reason=decision.reason if refused else None,
                guard=decision.guard,
            )
        )
        started = time.monotonic()
        label: str | None = None
        if decision.action in (Outcome.REFUSE, Outcome.INVALID):
            prefix = "refused" if refused else "error"
            label = TOOL_REFUSED if refused else TOOL_ERROR
            outcome = ToolOutcome(False, f"{prefix}: {decision.reason}")
        elif (misfit := self._misfit(decision)) is not None:
            label = TOOL_ERROR
            outcome = ToolOutcome(False, misfit)
        elif decision.tool == EXIT_PLAN_MODE and self.plan.active:
            outcome = await self._submit_plan(decision)
            if not outcome.ok:
                label = TOOL_REFUSED
        elif decision.action is Outcome.ASK_APPROVAL:
            outcome, approved = await self._with_approval(decision)
            if not approved:
                label = TOOL_REFUSED
        else:
            outcome = await self.tools.execute(decision)
        if label is None:
            label = TOOL_OK if outcome.ok else TOOL_ERROR
        if (
            self.checkpointer is not None
            and decision.action not in (Outcome.REFUSE, Outcome.INVALID)
            and decision.tool not in UNWRITING_TOOLS
        ):
            # Before the tool message: the transcript never runs ahead of the workspace a
            # resume restores.
            await self.checkpointer.after_call(turn)
        if decision.tool == SLEEP:
            if outcome.ok:
                outcome = await self._settle_for_sleep(turn, outcome)
                label = TOOL_OK if outcome.ok else TOOL_ERROR
            else:
                self.tools.ctx.slept = None  # an after-hook withheld it: no sleep
        model_output, _ = truncate(outcome.output, self.settings.output_cap)
        await self.add(_tool_message(call.id, model_output))
        output, cut = truncate(redact(outcome.output), self.settings.event_output_cap)
        await self.pub.event(
            ToolResult(
                turn=turn,
                call_id=call.id,
                tool=call.name,
                ok=outcome.ok,
                output=output,
                truncated=cut,
                duration_ms=int((time.monotonic() - started) * 1000),
                guard=outcome.guard,
            )
        )
        return ToolOutcome(outcome.ok, model_output), label

    async def _settle_for_sleep(self, turn: int, outcome: ToolOutcome) -> ToolOutcome:
        """An accepted sleep: checkpoint the workspace before its answer (the woken attempt
        restores it); a checkpoint that fails refuses the sleep, and the run goes on."""
        if self.checkpointer is None:
            return outcome
        try:
            await self.checkpointer.settle(turn)
        except RunStopped:
            raise  # the run was ended elsewhere: no sleep, no more writes
        except (ToolError, OSError, nats.errors.Error, BusError, RunnerError) as exc:
            self.tools.ctx.slept = None
            return ToolOutcome(
                False, f"sleep failed: the workspace could not be checkpointed ({exc}); not asleep"
            )
        return outcome

    async def _not_run(self, turn: int, call: ToolCallRequest, why: str) -> None:
        """Answer a call without running it (recorded as refused, with why)."""
        await self.pub.event(
            ToolCalled(
                turn=turn,
                call_id=call.id,
                tool=call.name,
                arguments={},
                refused=True,
                refusal_reason=why,
            )
        )
        await self.add(_tool_message(call.id, why))
        await self.pub.event(
            ToolResult(turn=turn, call_id=call.id, tool=call.name, ok=False, output=why)
        )

    def _misfit(self, decision: Decision) -> str | None:
        """For a `finish` whose details do not fit the output schema: what the model must fix
        (the call is not run, so the run goes on); None for any other call."""
        if self.typed is None or not isinstance(decision.args, FinishArgs):
            return None
        errors = self.typed.errors(decision.args.details)
        return self.typed.misfit(errors) if errors else None

    async def _submit_plan(self, decision: Decision) -> ToolOutcome:
        """exit_plan_mode: the plan is asked as an approval; approved lifts plan mode from the
        next turn, anything else ends the run."""
        plan = ExitPlanModeArgs.model_validate(decision.raw).plan  # validated in _decide
        approval_id, verdict, by, comment, surface = await self._ask(
            EXIT_PLAN_MODE,
            approval_summary(plan),
            "plan mode: approve the plan to let the agent carry it out with all its tools;"
            " deny to end the run with the plan as its result",
        )
        answered = PlanVerdict(plan, verdict, approval_id, by, comment, surface)
        self.plan.record(answered)
        if verdict != "approved":
            return ToolOutcome(False, not_approved_output(answered))
        tools = [s["function"]["name"] for s in self.tools.specs()]
        return ToolOutcome(True, approved_output(answered, tools))

    async def _with_approval(self, decision: Decision) -> tuple[ToolOutcome, bool]:
        """Ask for approval, run the call if approved; (outcome, whether approved)."""
        # The whole call, normalised (approval_text): a benign start padded with blanks
        # must not hide the rest.
        summary = call_summary(decision.tool, decision.raw)
        _, verdict, by, comment, _ = await self._ask(decision.tool, summary, decision.reason)
        if verdict != "approved":
            note = f" ({comment})" if comment else ""
            who = f" by {by}" if by else ""
            return ToolOutcome(False, f"approval {verdict}{who}{note}: the call was not run"), False
        return await self.tools.execute(decision), True

    async def _ask(
        self, tool: str, summary: str, why: str
    ) -> tuple[str, Verdict, str | None, str | None, str | None]:
        """Publish an approval request and wait for its answer (or its expiry); return
        (approval id, verdict, decided by, comment, surface) once the decision is published."""
        self.phase = RunStatus.AWAITING_APPROVAL.value
        approval_id = f"apr-{uuid.uuid4().hex[:12]}"
        expires = datetime.now(UTC) + timedelta(seconds=self.settings.approval_timeout)
        await self.pub.event(
            ApprovalRequested(
                approval_id=approval_id,
                tool=tool,
                summary=summary,
                why=why,
                expires_at=expires,
            )
        )
        await self.pub.flush()  # stored before anyone is waited on
        answer = await self.control.wait_decision(approval_id, self.settings.approval_timeout)
        verdict: Verdict
        if answer is None:
            verdict, by, comment, surface = "expired", None, None, None
        else:
            verdict = "approved" if answer.decision == "approve" else "denied"
            by, comment, surface = answer.decided_by, answer.comment, answer.surface
        trace.get_current_span().set_attribute(APPROVAL, verdict)
        await self.pub.event(
            ApprovalDecided(
                approval_id=approval_id,
                decision=verdict,
                decided_by=by,
                comment=comment,
                surface=surface,
            )
        )
        return approval_id, verdict, by, comment, surface
