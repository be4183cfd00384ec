"""Core's side of the lab end to end on real NATS + PostgreSQL: assembly at a revision, lab
runs and their source checks, the lab links and golden marks in agent_runs, eval suites in
the catalog."""

from __future__ import annotations

import uuid
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import DLQ
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events import (
    Event,
    Reason,
    RunCompleted,
    RunFailed,
    RunPrepared,
    RunRequested,
    RunStarted,
    RunTurn,
)
from nexus_events.events.evals import EvalApplied, EvalDeleted, EvalSuite
from nexus_events.events.lab import RunDiverged, RunGoldenMarked
from nexus_events.events.lab_specs import DivergenceKind, LabMode, LabSpec, OnDivergence
from nexus_events.events.specs import RepoSpec
from nexus_events.events.transcripts import TranscriptEntry
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_skill

from nexus_core.app import CoreApp
from nexus_core.assembly import AssemblyFailure
from nexus_core.lab_sources import LabSourceReader, SourceNotProjected
from nexus_core.runs_projection import AgentRunsProjection

from .support import AGENT_YAML, SKILL_MD, catalog_ready, eventually, query, run_events

AGENT_V2 = AGENT_YAML.replace("You implement tasks.", "You implement tasks, carefully.")
SKILL_V2 = SKILL_MD.replace("Use uv.", "Use uv and ruff.")


async def _catalog(bus: Bus, core: CoreApp) -> None:
    """implementer at revisions 1 and 2 (a new prompt), python at revisions 1 and 2."""
    await apply_agent(bus, AGENT_YAML)
    await apply_skill(bus, SKILL_MD)
    await apply_agent(bus, AGENT_V2)
    await apply_skill(bus, SKILL_V2)
    await catalog_ready(core)


async def _request(bus: Bus, run_id: str, **fields: Any) -> Any:
    body = RunRequested(**{"agent_id": "implementer", "input": "fix it", **fields})
    await bus.publish(subjects.run_event(run_id, RunEvent.REQUESTED), body)
    events = await eventually(
        lambda: run_events(bus, run_id),
        lambda evs: any(d.address.event in ("prepared", "failed") for d in evs),
    )
    return next(d.event for d in events if d.address.event in ("prepared", "failed"))


async def _run(bus: Bus, run_id: str, *events: Event) -> None:
    for event in events:
        subject = subjects.run_event(run_id, event.event_name)
        await bus.publish(subject, event, msg_id=f"test:{uuid.uuid4().hex}")


async def _view(bus: Bus, run_id: str, until: Any = lambda v: True) -> dict[str, Any]:
    async def get() -> dict[str, Any] | None:
        error, body = await query(bus, subjects.CORE_RUNS_GET, {"run_id": run_id})
        return None if error else body

    found = await eventually(get, lambda v: v is not None and until(v))
    assert found is not None
    return found


async def _recorded_source(bus: Bus, run_id: str, *, turns: int, transcript: bool) -> None:
    """A finished run of implementer in /src/app from commit c0ffee, `turns` turns long."""
    await _run(
        bus,
        run_id,
        RunRequested(
            agent_id="implementer", task_id="T-7", input="the recorded task", repo="/src/app"
        ),
        RunStarted(base_commit="c0ffee"),
        *(RunTurn(turn=t, tokens_in=1, tokens_out=1) for t in range(1, turns + 1)),
        RunCompleted(),
    )
    if transcript:
        entry = TranscriptEntry(attempt=1, index=0, op="message", message={"role": "user"})
        await bus.publish(subjects.run_transcript(run_id), entry)
    await _view(bus, run_id, lambda v: v["status"] == "completed")


async def test_assembly_at_an_agent_revision_skill_revisions_and_a_model(bus: Bus, core: CoreApp):
    await _catalog(bus, core)
    latest = await _request(bus, "r-latest")
    assert isinstance(latest, RunPrepared)
    assert latest.config.system_prompt == "You implement tasks, carefully."
    assert latest.config.catalog_revisions == {"agent/implementer": 2, "skill/python": 2}

    old = await _request(
        bus, "r-old", agent_revision=1, skill_revisions={"python": 1}, model="other-model"
    )
    assert isinstance(old, RunPrepared)
    config = old.config
    assert config.system_prompt == "You implement tasks."
    assert [s.content for s in config.skills] == ["# Python\nUse uv."]
    assert config.model.name == "other-model"
    assert config.catalog_revisions == {"agent/implementer": 1, "skill/python": 1}

    missing = await _request(bus, "r-missing", agent_revision=7)
    assert isinstance(missing, RunFailed)
    assert missing.reason == Reason.UNKNOWN_AGENT
    assert missing.message == "agent 'implementer' has no revision 7 (latest 2)"
    no_skill = await _request(bus, "r-no-skill", skill_revisions={"python": 5})
    assert isinstance(no_skill, RunFailed)
    assert no_skill.reason == Reason.UNKNOWN_SKILL
    assert "python#5" in no_skill.message


async def test_a_lab_run_is_assembled_from_its_source(bus: Bus, core: CoreApp):
    await _catalog(bus, core)
    await _recorded_source(bus, "src-1", turns=3, transcript=True)
    replay = LabSpec(mode=LabMode.REPLAY, source_run_id="src-1")
    prepared = await _request(bus, "lab-1", input="", lab=replay, origin="lab", agent_revision=1)
    assert isinstance(prepared, RunPrepared), prepared
    config = prepared.config
    assert config.lab == replay
    assert config.origin == "lab"
    assert config.permissions.can_commit is True
    assert (config.permissions.can_push, config.permissions.can_open_pr) == (False, False)
    assert config.permissions.can_merge is False
    assert config.repo == RepoSpec(url="/src/app", ref="c0ffee")
    assert (config.task_id, config.input) == ("T-7", "the recorded task")
    assert config.canary is None

    fork = LabSpec(mode=LabMode.FORK, source_run_id="src-1", at_turn=3, input="try X")
    forked = await _request(bus, "lab-2", lab=fork, repo="/elsewhere")
    assert isinstance(forked, RunPrepared)
    assert forked.config.repo == RepoSpec(url="/elsewhere")
    assert forked.config.input == "fix it"


async def test_lab_source_checks_fail_with_one_line(bus: Bus, core: CoreApp):
    await _catalog(bus, core)
    await _recorded_source(bus, "src-short", turns=2, transcript=True)
    await _recorded_source(bus, "src-expired", turns=2, transcript=False)
    cases = {
        "lab-nosrc": (LabSpec(mode=LabMode.REPLAY, source_run_id="ghost"), "no run 'ghost'"),
        "lab-expired": (
            LabSpec(mode=LabMode.REPLAY, source_run_id="src-expired"),
            "the transcript of run 'src-expired' has expired (NEXUS_TRANSCRIPTS keeps ",
        ),
        "lab-past": (
            LabSpec(mode=LabMode.FORK, source_run_id="src-short", at_turn=3),
            "run 'src-short' has 2 turns; cannot fork at turn 3",
        ),
    }
    for run_id, (lab, message) in cases.items():
        failed = await _request(bus, run_id, lab=lab)
        assert isinstance(failed, RunFailed), (run_id, failed)
        assert failed.reason == Reason.LAB_SOURCE_UNUSABLE
        assert failed.message.startswith(message), failed.message
        assert "\n" not in failed.message
    # Another agent may not take a run's transcript as its own (it may hold other tools).
    await apply_agent(bus, AGENT_YAML.replace("id: implementer", "id: other-agent"))
    await catalog_ready(core)
    lab = LabSpec(mode=LabMode.FORK, source_run_id="src-short", at_turn=1)
    failed = await _request(bus, "lab-other", agent_id="other-agent", lab=lab)
    assert isinstance(failed, RunFailed), failed
    assert failed.reason == Reason.LAB_SOURCE_UNUSABLE
    assert failed.message == (
        "run 'src-short' is a run of agent 'implementer'; a replay or fork of it runs"
        " 'implementer' too, not 'other-agent'"
    )
    within = await _request(
        bus, "lab-within", lab=LabSpec(mode=LabMode.FORK, source_run_id="src-short", at_turn=2)
    )
    assert isinstance(within, RunPrepared)


async def test_a_source_in_the_stream_but_not_yet_projected_is_retried(bus: Bus, core_pool: Any):
    """The reader tells a source agent_runs has not shown yet from one that does not exist
    (an empty agent_runs stands in for a projection behind the stream)."""
    async with core_pool.acquire() as conn:
        await conn.execute("CREATE SCHEMA IF NOT EXISTS lab_lagging")
        await AgentRunsProjection("lab_lagging").create(conn, "lab_lagging")
    reader = LabSourceReader(core_pool, bus.js, runs_schema="lab_lagging")
    await _run(bus, "src-new", RunRequested(agent_id="implementer"))
    lagging = await reader.read(
        LabSpec(mode=LabMode.REPLAY, source_run_id="src-new"), "implementer"
    )
    assert isinstance(lagging, SourceNotProjected)
    assert lagging.message == "run 'src-new' is not in agent_runs yet; try again"
    missing = await reader.read(
        LabSpec(mode=LabMode.REPLAY, source_run_id="src-none"), "implementer"
    )
    assert isinstance(missing, AssemblyFailure)
    assert not isinstance(missing, SourceNotProjected)
    assert missing.message == "no run 'src-none'"


async def test_lab_links_golden_and_divergence_in_agent_runs(
    bus: Bus, core: CoreApp, core_pool: Any
):
    await _catalog(bus, core)
    await _recorded_source(bus, "src-2", turns=2, transcript=True)
    # Marked while it runs: counts for nothing.
    await _run(bus, "live-1", RunRequested(agent_id="implementer"), RunGoldenMarked())
    for run_id, lab in (
        ("rep-1", LabSpec(mode=LabMode.REPLAY, source_run_id="src-2")),
        ("fork-1", LabSpec(mode=LabMode.FORK, source_run_id="src-2", at_turn=1)),
        ("rep-2", LabSpec(mode=LabMode.REPLAY, source_run_id="src-2")),
    ):
        assert isinstance(await _request(bus, run_id, lab=lab), RunPrepared)
    diverged = RunDiverged(
        turn=2, kind=DivergenceKind.SYSTEM_PROMPT, detail="prompt", action=OnDivergence.STOP
    )
    later = RunDiverged(turn=3, kind=DivergenceKind.TOOLS, detail="t", action=OnDivergence.STOP)
    await _run(bus, "rep-1", diverged, later)
    await _run(bus, "src-2", RunGoldenMarked(marked_by="ana"), RunGoldenMarked(golden=False))
    await _run(bus, "src-2", RunGoldenMarked(note="again"))

    source = await _view(bus, "src-2", lambda v: v["golden"] and len(v["forks"]) == 3)
    assert source["forks"] == ["rep-1", "fork-1", "rep-2"]
    assert source["replay_of"] is None
    rep = await _view(bus, "rep-1", lambda v: v["diverged_at"] is not None)
    assert (rep["replay_of"], rep["forked_from"], rep["fork_turn"]) == ("src-2", None, None)
    assert (rep["diverged_at"], rep["divergence"]) == (2, "system_prompt")
    fork = await _view(bus, "fork-1")
    assert (fork["forked_from"], fork["fork_turn"], fork["replay_of"]) == ("src-2", 1, None)
    await _run(bus, "live-1", RunCompleted())
    live = await _view(bus, "live-1", lambda v: v["status"] == "completed")
    assert live["golden"] is False

    error, golden = await query(bus, subjects.CORE_RUNS_LIST, {"golden": True})
    assert error is None
    assert [r["run_id"] for r in golden["runs"]] == ["src-2"]
    assert golden["runs"][0]["forks"] == ["rep-1", "fork-1", "rep-2"]

    before = await core_pool.fetch("SELECT * FROM core_agent_runs.agent_runs ORDER BY run_id")
    error, _ = await query(bus, subjects.CORE_PROJECTIONS_REBUILD, {"projection": "agent_runs"})
    assert error is None
    after = await core_pool.fetch("SELECT * FROM core_agent_runs.agent_runs ORDER BY run_id")
    assert [dict(r) for r in after] == [dict(r) for r in before]


async def test_eval_suites_in_the_catalog_are_not_dead_lettered(bus: Bus, core: CoreApp):
    suite = EvalSuite.model_validate({"id": "smoke", "cases": [{"id": "c1", "input": "do"}]})
    await bus.publish(
        subjects.catalog_event(CatalogKind.EVAL, "smoke", "applied"), EvalApplied(suite=suite)
    )
    await bus.publish(subjects.catalog_event(CatalogKind.EVAL, "smoke", "deleted"), EvalDeleted())
    await apply_agent(bus, AGENT_YAML)  # after them in the stream
    await catalog_ready(core)
    error, agents = await query(bus, subjects.CORE_CATALOG_AGENTS_LIST)
    assert error is None
    assert [a["definition"]["id"] for a in agents["agents"]] == ["implementer"]
    info = await bus.js.stream_info(DLQ)
    assert info.state.messages == 0
