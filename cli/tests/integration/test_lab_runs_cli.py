"""`nexus replay|fork|golden` against a real core on a real nats-server and PostgreSQL: the
request each publishes (decoded from NEXUS_RUNS), how --wait reports a lab run's end, and
the refusals (one line, exit 2, nothing published)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path

from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunStatus
from nexus_events.contract.streams import RUNS
from nexus_events.events import (
    LabSpec,
    Origin,
    Reason,
    RunCompleted,
    RunDiverged,
    RunFailed,
    RunGoldenMarked,
    RunRequested,
    RunTurn,
    TerminalEvent,
)
from nexus_events.events.lab_specs import DivergenceKind, LabMode, OnDivergence
from nexus_events.transport.bus import Bus
from tests.support.cli import nexus

from nexus_cli.client import whoami
from nexus_cli.follow import follow

from .lab_recordings import (
    AGENT_ID,
    Step,
    apply_lab_agent,
    completed,
    projected,
    record_run,
    requests_of,
)

SRC = "run_src_1"
THREE_TURNS = [
    [Step("write_file", {"path": "notes/step1.txt", "content": "one"})],
    [Step("read_file", {"path": "notes/step1.txt"}, output="one")],
    [Step("finish", {"summary": "done"})],
]


async def _recorded_source(core: CoreApp, bus: Bus) -> None:
    await apply_lab_agent(bus, core.catalog_fresh)
    await record_run(bus, SRC, THREE_TURNS, completed(3), input_text="fix the bug")
    await projected(bus, SRC, RunStatus.COMPLETED, 3)


async def _lab_requests(bus: Bus) -> list[tuple[str, RunRequested]]:
    return [(rid, r) for rid, r in await requests_of(bus) if r.origin is Origin.LAB]


async def test_replay_publishes_a_lab_request_with_its_overrides(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await _recorded_source(core, bus)
    plain = await nexus(nats_url, tmp_path, "replay", SRC, "--json")
    assert plain.exit_code == 0, plain.output
    first_id = json.loads(plain.stdout)["run_id"]
    changed = await nexus(
        nats_url,
        tmp_path,
        *("replay", SRC, "--agent-revision", "2", "--skill", "style@3", "--skill", "lint@1"),
        *("--model", "other-model", "--continue-live"),
    )
    assert changed.exit_code == 0, changed.output
    second_id = changed.stdout.strip()

    [(rid1, first), (rid2, second)] = await _lab_requests(bus)
    assert (rid1, rid2) == (first_id, second_id)
    base = {
        "agent_id": AGENT_ID,
        "input": "fix the bug",
        "origin": Origin.LAB,
        "requested_by": whoami(),
    }
    assert first == RunRequested(**base, lab=LabSpec(mode=LabMode.REPLAY, source_run_id=SRC))
    assert first.lab is not None
    assert first.lab.on_divergence is OnDivergence.STOP
    assert second == RunRequested(
        **base,
        agent_revision=2,
        skill_revisions={"style": 3, "lint": 1},
        model="other-model",
        lab=LabSpec(mode=LabMode.REPLAY, source_run_id=SRC, on_divergence=OnDivergence.LIVE),
    )


async def test_fork_publishes_the_turn_and_the_input(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await _recorded_source(core, bus)
    forked = await nexus(
        nats_url, tmp_path, "fork", SRC, "--at-turn", "2", "--agent-revision", "1",
        "--input", "try the other file",
    )  # fmt: skip
    assert forked.exit_code == 0, forked.output
    [(rid, request)] = await _lab_requests(bus)
    assert rid == forked.stdout.strip()
    assert request.agent_revision == 1
    assert request.lab == LabSpec(
        mode=LabMode.FORK, source_run_id=SRC, at_turn=2, input="try the other file"
    )
    assert (request.agent_id, request.input) == (AGENT_ID, "fix the bug")
    assert request.origin is Origin.LAB


async def test_refusals_are_one_line_exit_2_and_publish_nothing(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await _recorded_source(core, bus)
    cases = [
        (("replay", "run_nope"), "no run 'run_nope' to start from"),
        (("replay", SRC, "--skill", "style"), "invalid --skill 'style': use NAME@REVISION"),
        (("replay", SRC, "--skill", "style@0"), "invalid --skill 'style@0'"),
        (("replay", SRC, "--skill", "st yle@2"), "skill name"),
        (("replay", SRC, "--skill", "a@1", "--skill", "a@2"), "--skill a given twice"),
        (("replay", SRC, "--agent-revision", "0"), "invalid --agent-revision 0"),
        (("fork", SRC, "--at-turn", "0"), "invalid --at-turn 0: turns count from 1"),
        (("fork", SRC, "--at-turn", "4"), f"run {SRC} has 3 turns; cannot fork at turn 4"),
        (("fork", "run_nope", "--at-turn", "1"), "no run 'run_nope' to start from"),
    ]
    for args, line in cases:
        result = await nexus(nats_url, tmp_path, *args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("error: "), (args, result.stderr)
        assert line in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
    assert await _lab_requests(bus) == []


async def _answer_lab_run(
    bus: Bus, known: set[str], *events: RunTurn | RunDiverged | TerminalEvent
) -> str:
    """Wait for the CLI's new lab request (not in `known`), then publish `events` as that
    run's (a runner's part)."""
    stream = follow(bus, RUNS, subjects.run_events_filter(None, RunRequested))
    async with contextlib.aclosing(stream) as requests:
        async for d in requests:
            new = str(d.address.run_id) not in known
            if new and isinstance(d.event, RunRequested) and d.event.origin is Origin.LAB:
                rid = str(d.address.run_id)
                break
    for event in events:
        await bus.publish(subjects.run_event(rid, type(event)), event)
    return rid


async def _replay_waiting(
    bus: Bus, nats_url: str, tmp_path: Path, *events: RunTurn | RunDiverged | TerminalEvent,
    args: tuple[str, ...] = (),
) -> tuple[str, int, str, str]:  # fmt: skip
    known = {rid for rid, _ in await _lab_requests(bus)}
    runner = asyncio.create_task(_answer_lab_run(bus, known, *events))
    result = await nexus(nats_url, tmp_path, "replay", SRC, "--wait", *args)
    rid = await asyncio.wait_for(runner, 10)
    return rid, result.exit_code, result.stdout, result.stderr


async def test_replay_wait_reports_the_first_divergence(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await _recorded_source(core, bus)
    diverged = RunDiverged(
        turn=3,
        kind=DivergenceKind.TOOL_RESULT,
        index=4,
        detail="read_skill returned other text",
        action=OnDivergence.STOP,
    )
    later = diverged.model_copy(update={"turn": 4, "detail": "not the first"})
    rid, code, out, _ = await _replay_waiting(
        bus, nats_url, tmp_path, diverged, later, RunCompleted(reason=Reason.DIVERGED)
    )
    assert code == 0, out
    first = "first divergence at turn 3 (tool_result): read_skill returned other text [stopped]"
    assert first in out
    assert "not the first" not in out
    assert f"run {rid} completed (diverged)" in out


async def test_replay_wait_without_divergence_counts_the_turns_reproduced(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await _recorded_source(core, bus)
    turns = [RunTurn(turn=n, replayed=True) for n in (1, 2, 3)]
    _, code, out, _ = await _replay_waiting(
        bus, nats_url, tmp_path, *turns, RunCompleted(), args=("--json",)
    )
    assert code == 0, out
    reply = json.loads(out)
    assert (reply["status"], reply["turns"], reply["divergence"]) == ("completed", 3, None)

    again = await _replay_waiting(bus, nats_url, tmp_path, *turns, RunCompleted())
    assert again[1] == 0
    assert "no divergence: reproduced 3 turns" in again[2]


async def test_replay_wait_of_an_unusable_source_prints_cores_line_and_exits_1(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await _recorded_source(core, bus)
    line = f"the transcript of run {SRC} has expired (NEXUS_TRANSCRIPTS keeps 30 days)"
    rid, code, out, _ = await _replay_waiting(
        bus, nats_url, tmp_path, RunFailed(reason=Reason.LAB_SOURCE_UNUSABLE, message=line)
    )
    assert code == 1, out
    assert f"run {rid} failed (lab_source_unusable: {line})" in out
    assert "no divergence" not in out


async def _golden_marks(bus: Bus, run_id: str) -> list[RunGoldenMarked]:
    found = []
    async for d in bus.replay(RUNS, filter_subject=subjects.run_event(run_id, RunGoldenMarked)):
        assert isinstance(d.event, RunGoldenMarked)
        found.append(d.event)
    return found


async def test_golden_marks_and_unmarks_a_completed_run(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await _recorded_source(core, bus)
    marked = await nexus(nats_url, tmp_path, "golden", SRC, "--note", "the reference fix")
    assert marked.exit_code == 0, marked.output
    assert f"run {SRC} marked golden" in marked.stdout
    unmarked = await nexus(nats_url, tmp_path, "golden", SRC, "--unmark", "--json")
    assert unmarked.exit_code == 0, unmarked.output
    assert json.loads(unmarked.stdout)["golden"] is False
    assert await _golden_marks(bus, SRC) == [
        RunGoldenMarked(golden=True, marked_by=whoami(), note="the reference fix"),
        RunGoldenMarked(golden=False, marked_by=whoami(), note=""),
    ]
    # attach reads the marks as sentences among the recent events
    attached = await nexus(nats_url, tmp_path, "attach", SRC)
    assert attached.exit_code == 0, attached.output
    assert f"marked golden by {whoami()}: the reference fix" in attached.stdout
    assert f"golden mark taken back by {whoami()}" in attached.stdout


async def test_golden_refuses_a_live_or_unsuccessful_run(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await apply_lab_agent(bus, core.catalog_fresh)
    await record_run(bus, "run_live", [[Step("list_files")]], None)
    await projected(bus, "run_live", RunStatus.RUNNING, 1)
    failed = RunFailed(reason=Reason.BUDGET_EXCEEDED, message="over budget")
    await record_run(bus, "run_bad", [[Step("list_files")]], failed)
    await projected(bus, "run_bad", RunStatus.FAILED, 1)
    expected: list[tuple[str, Callable[[str], bool]]] = [
        ("run_live", lambda e: "run run_live has not ended (running)" in e),
        ("run_bad", lambda e: "run run_bad did not complete (failed, budget_exceeded)" in e),
    ]
    for run_id, says in expected:
        result = await nexus(nats_url, tmp_path, "golden", run_id)
        assert result.exit_code == 2, result.output
        assert says(result.stderr), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert await _golden_marks(bus, run_id) == []
    missing = await nexus(nats_url, tmp_path, "golden", "run_nope")
    assert missing.exit_code == 3, missing.output
