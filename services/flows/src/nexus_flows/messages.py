"""The outgoing events of a flow's decisions, each under a deterministic message id
(``flow:<flow_run_id>:<event>:<step>:<round>:<item>``): deciding twice publishes nothing
twice in effect."""

from __future__ import annotations

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import CancelRequested, Event
from nexus_events.transport.publish import Outgoing

from nexus_flows.records import FlowState


def msg_id(flow_run_id: str, event: str, step: str, round: int, item: int | None) -> str:
    return f"flow:{flow_run_id}:{event}:{step}:{round}:{'-' if item is None else item}"


def terminal_msg_id(state: FlowState, event: str) -> str:
    # A resumed flow may fail (or complete) again: each resume is its own attempt.
    return f"flow:{state.flow_run_id}:{event}:{state.resumes}"


def flow_message(  # noqa: PLR0917 - the message id's parts, in order
    state: FlowState, event: Event, name: str, step: str, round: int, item: int | None
) -> Outgoing:
    """A step's event, under the id of its name, step, round and item."""
    fid = state.flow_run_id
    return Outgoing(
        subjects.flow_event(fid, type(event)),
        event,
        msg_id=msg_id(fid, name, step, round, item),
    )


def terminal_message(state: FlowState, event: Event) -> Outgoing:
    """The flow's `completed`, `failed` or `cancelled`, once per resume attempt."""
    fid = state.flow_run_id
    return Outgoing(
        subjects.flow_event(fid, type(event)),
        event,
        msg_id=terminal_msg_id(state, event.event_name),
    )


def cancel_run(state: FlowState, run_id: str) -> Outgoing:
    """Cancel a map item's run the join no longer needs."""
    return Outgoing(
        subjects.run_event(run_id, RunEvent.CANCEL_REQUESTED),
        CancelRequested(reason="flow_step_not_needed", requested_by=f"flow:{state.flow_run_id}"),
        msg_id=f"flow:{run_id}:cancel",
    )


__all__ = ["cancel_run", "flow_message", "msg_id", "terminal_message", "terminal_msg_id"]
