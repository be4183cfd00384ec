"""A run's model-visible transcript (``nexus.agent.transcript.v1.<run_id>``, NEXUS_TRANSCRIPTS).

Run events cut tool output (`event_output_cap`), so they cannot rebuild what the model saw.
The runner writes each message it adds to the conversation, and each condensation, as one
entry here before the model call that sends it: folding the entries of a run in order gives
the exact messages of its next call, which is how attempt n+1 of a run goes on byte for byte
(docs/resume.md).

Entries are numbered per run (`index`, from 0, one per message or condensation). Attempt
m > 1 writes only after its ``resumed`` event is stored, from that event's `entries` index;
so the entries of attempt m count in ``[entries_m, entries_{m+1})`` (attempt 1 from 0), and
anything an older attempt wrote past the point a newer one resumed from is void (a runner
that was still alive). A transcript with a gap in that range is corrupt, and a resume from it
fails with ``resume_failed``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from nexus_events.contract.subjects import Family
from nexus_events.events.base import Event, register
from nexus_events.events.runs import Condensation


@register
class TranscriptEntry(Event):
    event_family: ClassVar[Family] = Family.TRANSCRIPT
    event_name: ClassVar[str] = "entry"

    attempt: int = Field(..., ge=1, description="Attempt that wrote it.")
    index: int = Field(..., ge=0, description="Position in the run's transcript, from 0.")
    op: Literal["message", "condense"] = Field(..., description="What the entry does.")
    message: dict[str, Any] | None = Field(
        None, description="message: the chat message appended, exactly as sent to the model."
    )
    condensation: Condensation | None = Field(
        None, description="condense: how the messages so far were condensed."
    )
    inbox_seq: int | None = Field(
        None,
        ge=1,
        description="message: the NEXUS_INBOX sequence of the inbox message it injects, so a"
        " resumed attempt does not inject it again.",
    )

    @model_validator(mode="after")
    def _payload(self) -> TranscriptEntry:
        if self.op == "message" and self.message is None:
            raise ValueError("a message entry needs `message`")
        if self.op == "condense" and self.condensation is None:
            raise ValueError("a condense entry needs `condensation`")
        return self
