"""`nexus flow run|ls|show|cancel|resume|signal` on a real nats-server: requests land on
NEXUS_FLOWS as valid events, --follow prints the flow's events and exits with its outcome,
and the queries go to nexus.flows.v1.list|get (answered here by a small responder)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from nexus_events.contract import subjects
from nexus_events.contract.streams import FLOWS
from nexus_events.events import (
    FlowAccepted,
    FlowCancelRequested,
    FlowCompleted,
    FlowDefinition,
    FlowFailed,
    FlowRequested,
    FlowResumed,
    FlowResumeRequested,
    FlowSignal,
    FlowStepFinished,
    FlowStepStarted,
    FlowWaiting,
)
from nexus_events.events.base import Event
from nexus_events.events.flows import FlowRunView, FlowStatus, FlowStepView
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.support.cli import nexus

from nexus_cli.client import whoami

from .flows_responder import flows_service

DEFINITION = FlowDefinition.model_validate(
    {"id": "feature", "steps": [{"id": "implement", "kind": "run", "agent": "implementer"}]}
)


async def stored(bus: Bus, flow_run_id: str | None = None) -> list[tuple[str, Event]]:
    return [
        (d.address.ids["flow_run_id"], d.event)
        async for d in bus.replay(FLOWS, filter_subject=subjects.flow_events_filter(flow_run_id))
    ]


async def publish(bus: Bus, flow_run_id: str, *events: Event) -> None:
    for event in events:
        await bus.publish(subjects.flow_event(flow_run_id, event.event_name), event)


def one_error_line(stderr: str, text: str) -> None:
    assert stderr.startswith("error: "), stderr
    assert text in stderr.splitlines()[0], stderr
    assert len(stderr.strip().splitlines()) <= 2  # the error, at most a hint


async def test_flow_run_publishes_a_valid_flow_requested(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    result = await nexus(
        nats_url, tmp_path, "flow", "run", "feature", "--task", "T-1", "--input", "add x",
        "--repo", "https://example.com/r.git", "--label", "team=core", "-o", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    flow_run_id = json.loads(result.stdout)["flow_run_id"]
    [(got_id, event)] = await stored(bus)
    assert got_id == flow_run_id
    assert flow_run_id.startswith("flow_")
    assert isinstance(event, FlowRequested)
    assert (event.flow, event.task_id, event.input, event.origin) == (
        "feature",
        "T-1",
        "add x",
        "cli",
    )
    assert event.repo is not None
    assert event.repo.url == "https://example.com/r.git"
    assert (event.requested_by, event.labels) == (whoami(), {"team": "core"})

    bad = await nexus(nats_url, tmp_path, "flow", "run", "no good")
    assert bad.exit_code == 2
    one_error_line(bad.stderr, "invalid flow id")


async def test_follow_prints_each_event_and_exits_0_when_the_flow_completes(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    cmd = asyncio.create_task(
        nexus(nats_url, tmp_path, "flow", "run", "feature", "--flow-run-id", "fr_ok", "-f")
    )

    async def requested() -> bool:
        return len(await stored(bus, "fr_ok")) == 1

    await eventually(requested, what="the CLI's request")
    now = datetime.now(UTC)
    await publish(
        bus,
        "fr_ok",
        FlowAccepted(flow="feature", revision=3, definition=DEFINITION),
        FlowStepStarted(
            step="implement", kind="run", run_id="fr_ok-implement-r1", agent_id="implementer"
        ),
        FlowStepFinished(
            step="implement",
            status="succeeded",
            run_id="fr_ok-implement-r1",
            output={"verdict": "approve"},
        ),
        FlowWaiting(
            step="ship",
            kind="gate",
            until=now,
            summary="Ship it?",
            approval_id="ap-1",
            gate_run_id="fr_ok-ship-r1",
        ),
        FlowResumed(step="ship", by="approved", decided_by="ana"),
        FlowCompleted(),
    )
    result = await asyncio.wait_for(cmd, 20)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "flow run fr_ok requested"
    body = [line.split(" ", 1)[1] for line in lines[1:-1]]  # without the time stamps
    assert body == [
        f"requested flow feature by {whoami()}",
        "accepted: flow feature revision 3",
        "step implement started (run): run fr_ok-implement-r1 agent implementer",
        "step implement succeeded verdict approve [run fr_ok-implement-r1]",
        f"step ship waiting for approval ap-1 until {now.isoformat().replace('+00:00', 'Z')}:"
        " Ship it? -> `nexus approve fr_ok-ship-r1 ap-1` (or `nexus deny ...`)",
        "step ship resumed: approved by ana",
        "flow completed",
    ]
    assert lines[-1] == "flow run fr_ok completed"


async def test_follow_exits_1_when_the_flow_fails_and_5_when_the_wait_runs_out(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    # Stored before the command starts: --follow reads the flow's past events first.
    await publish(
        bus,
        "fr_bad",
        FlowStepFinished(
            step="review", round=2, status="failed", reason="invalid_output", message="no verdict"
        ),
        FlowFailed(step="review", reason="step_failed", message="review failed"),
    )
    failed = await nexus(
        nats_url, tmp_path, "flow", "run", "feature", "--flow-run-id", "fr_bad", "-f"
    )
    assert failed.exit_code == 1, failed.output
    assert "step review round 2 failed (invalid_output: no verdict)" in failed.stdout
    assert "flow failed at step review (step_failed: review failed)" in failed.stdout

    slow = await nexus(
        nats_url, tmp_path, "flow", "run", "feature", "--flow-run-id", "fr_slow", "-f",
        "--wait", "1",
    )  # fmt: skip
    assert slow.exit_code == 5, slow.output
    one_error_line(slow.stderr, "flow run fr_slow had not ended")


def view(
    flow_run_id: str, status: FlowStatus, task: str = "T-1", step: str | None = None
) -> FlowRunView:
    return FlowRunView(
        flow_run_id=flow_run_id,
        flow="feature",
        revision=2,
        status=status,
        task_id=task,
        current_step=step,
        steps=[
            FlowStepView(
                step="implement", kind="run", round=1, status="succeeded",
                run_id=f"{flow_run_id}-implement-r1", agent_id="implementer",
            ),
            FlowStepView(
                step="ship", kind="gate", round=1, status="waiting", approval_id="ap-1"
            ),
        ],
    )  # fmt: skip


async def test_ls_and_show_ask_the_flows_service(bus: Bus, nats_url: str, tmp_path: Path) -> None:
    down = await nexus(nats_url, tmp_path, "flow", "ls")
    assert down.exit_code == 4
    one_error_line(down.stderr, "the flows service is not running")
    # A command still goes to the stream: the service acts on it when it is back.
    cancel = await nexus(nats_url, tmp_path, "flow", "cancel", "fr_1", "-o", "json")
    assert cancel.exit_code == 0, cancel.output
    assert json.loads(cancel.stdout) == {"flow_run_id": "fr_1", "requested": "cancel"}
    assert "the flows service is not answering" in cancel.stderr
    assert [(fid, type(e)) for fid, e in await stored(bus)] == [("fr_1", FlowCancelRequested)]

    views = [view("fr_1", FlowStatus.WAITING, step="ship"), view("fr_2", FlowStatus.COMPLETED)]
    async with flows_service(bus, views) as flows:
        listed = await nexus(nats_url, tmp_path, "flow", "ls", "-o", "json")
        assert listed.exit_code == 0, listed.output
        assert [f["flow_run_id"] for f in json.loads(listed.stdout)["flows"]] == ["fr_2", "fr_1"]

        waiting = await nexus(
            nats_url, tmp_path, "flow", "ls", "--status", "waiting", "--flow", "feature",
            "--task", "T-1",
        )  # fmt: skip
        assert waiting.exit_code == 0, waiting.output
        [row] = [line for line in waiting.stdout.splitlines() if line.startswith("fr_")]
        assert row.split()[:5] == ["fr_1", "feature", "T-1", "waiting", "ship"]
        assert flows.list_queries[-1].model_dump(exclude={"limit", "cursor"}) == {
            "status": FlowStatus.WAITING,
            "flow": "feature",
            "task_id": "T-1",
        }

        shown = await nexus(nats_url, tmp_path, "flow", "show", "fr_1")
        assert shown.exit_code == 0, shown.output
        assert shown.stdout.splitlines()[0] == "flow run fr_1  flow feature revision 2"
        # The run id, what `nexus attach` takes, leads its row whole.
        assert any(line.startswith("fr_1-implement-r1 ") for line in shown.stdout.splitlines())
        assert "ap-1" in shown.stdout
        as_json = await nexus(nats_url, tmp_path, "flow", "show", "fr_1", "-o", "json")
        assert FlowRunView.model_validate_json(as_json.stdout) == views[0]

        missing = await nexus(nats_url, tmp_path, "flow", "show", "fr_nope")
        assert missing.exit_code == 3
        one_error_line(missing.stderr, "no flow run 'fr_nope'")
        bad = await nexus(nats_url, tmp_path, "flow", "ls", "--status", "sleeping")
        assert bad.exit_code == 2
        one_error_line(bad.stderr, "unknown status 'sleeping'")


async def test_cancel_resume_and_signal_publish_commands_for_known_flow_runs(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    views = [view("fr_live", FlowStatus.RUNNING), view("fr_failed", FlowStatus.FAILED)]
    async with flows_service(bus, views):
        cancel = await nexus(nats_url, tmp_path, "flow", "cancel", "fr_live")
        assert cancel.exit_code == 0, cancel.output
        resume_live = await nexus(nats_url, tmp_path, "flow", "resume", "fr_live")
        assert resume_live.exit_code == 2
        one_error_line(resume_live.stderr, "only a failed one resumes")
        for _ in range(2):  # a second resume (after a second failure) is not a duplicate
            resume = await nexus(nats_url, tmp_path, "flow", "resume", "fr_failed")
            assert resume.exit_code == 0, resume.output
        signal = await nexus(
            nats_url,
            tmp_path,
            "flow",
            "signal",
            "fr_live",
            "pr-42",
            "--payload",
            '{"merged": true}',
        )
        assert signal.exit_code == 0, signal.output
        unknown = await nexus(nats_url, tmp_path, "flow", "cancel", "fr_nope")
        assert unknown.exit_code == 3
        one_error_line(unknown.stderr, "no flow run 'fr_nope'")
        not_json = await nexus(
            nats_url, tmp_path, "flow", "signal", "fr_live", "c", "--payload", "{"
        )
        assert not_json.exit_code == 2
        one_error_line(not_json.stderr, "--payload is not JSON")

    events = await stored(bus)
    assert [(fid, type(e)) for fid, e in events] == [
        ("fr_live", FlowCancelRequested),
        ("fr_failed", FlowResumeRequested),
        ("fr_failed", FlowResumeRequested),
        ("fr_live", FlowSignal),
    ]
    cancel_event, signal_event = events[0][1], events[3][1]
    assert isinstance(cancel_event, FlowCancelRequested)
    assert cancel_event.requested_by == whoami()
    assert isinstance(signal_event, FlowSignal)
    assert (signal_event.correlation_id, signal_event.payload) == ("pr-42", {"merged": True})
