"""What the lab made of a run, for its page: the run it replays or forks (and at which turn),
the runs forked or replayed from it, whether it is golden, its first divergence and its
canary arm; from core's RunView, and from the run's own events where the view is silent
(a projection that has not caught up, or a core that predates those fields)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nexus_events.contract.runstate import RunEvent
from nexus_events.events.lab import RunDiverged
from nexus_events.events.lab_specs import CanaryArm, LabMode, LabSpec
from pydantic import ValidationError

from nexus_console.live.hub import LiveEvent


@dataclass(frozen=True, slots=True)
class Divergence:
    """A replay's first divergence; `seq` is its `diverged` event on the timeline (None when
    only the view knows it)."""

    turn: int
    kind: str
    detail: str = ""
    action: str = ""
    seq: int | None = None


@dataclass(frozen=True, slots=True)
class CanaryShown:
    arm: str
    revision: int | None = None  # the arm's agent revision, when `prepared` says it
    share: float | None = None


@dataclass(frozen=True, slots=True)
class LabLinks:
    replay_of: str | None = None
    forked_from: str | None = None
    fork_turn: int | None = None
    fork_input: str | None = None
    forks: list[str] = field(default_factory=list)
    golden: bool = False
    divergence: Divergence | None = None
    canary: CanaryShown | None = None

    def __bool__(self) -> bool:
        return bool(
            self.replay_of or self.forked_from or self.forks or self.golden
            or self.divergence or self.canary
        )  # fmt: skip


def _first(events: list[LiveEvent], name: RunEvent) -> LiveEvent | None:
    return next((e for e in events if e.name == name and not e.poison), None)


def _lab_spec(events: list[LiveEvent]) -> LabSpec | None:
    requested = _first(events, RunEvent.REQUESTED)
    raw = requested.body.get("lab") if requested else None
    if not isinstance(raw, dict):
        return None
    try:
        return LabSpec.model_validate(raw)
    except ValidationError:
        return None  # the timeline shows the request as it is


def _canary_arm(events: list[LiveEvent]) -> CanaryArm | None:
    prepared = _first(events, RunEvent.PREPARED)
    config = prepared.body.get("config") if prepared else None
    raw = config.get("canary") if isinstance(config, dict) else None
    if not isinstance(raw, dict):
        return None
    try:
        return CanaryArm.model_validate(raw)
    except ValidationError:
        return None


def _divergence(run: dict[str, Any], events: list[LiveEvent]) -> Divergence | None:
    diverged = _first(events, RunEvent.DIVERGED)
    if diverged is not None:
        try:
            event = RunDiverged.model_validate(diverged.body)
        except ValidationError:
            event = None  # the timeline shows the event as it is
        if event is not None:
            return Divergence(
                event.turn, event.kind.value, event.detail, event.action.value, diverged.seq
            )
    turn = run.get("diverged_at")
    if isinstance(turn, int):
        return Divergence(turn=turn, kind=str(run.get("divergence") or ""))
    return None


def _golden(run: dict[str, Any], events: list[LiveEvent]) -> bool:
    """The last `golden_marked` decides (a mark can be taken back); the view without one."""
    marks = [e for e in events if e.name == RunEvent.GOLDEN_MARKED and not e.poison]
    if marks:
        return marks[-1].body.get("golden", True) is not False
    return bool(run.get("golden"))


def lab_links(run: dict[str, Any], events: list[LiveEvent]) -> LabLinks:
    """`run` is core's RunView as JSON, `events` the run's stored events, oldest first."""
    spec = _lab_spec(events)
    replay_of = run.get("replay_of") or (
        spec.source_run_id if spec and spec.mode is LabMode.REPLAY else None
    )
    forked_from = run.get("forked_from") or (
        spec.source_run_id if spec and spec.mode is LabMode.FORK else None
    )
    fork_turn = run.get("fork_turn") or (spec.at_turn if spec and forked_from else None)
    arm = _canary_arm(events)
    canary = None
    if arm is not None:
        revision = arm.candidate_revision if arm.arm == "candidate" else arm.current_revision
        canary = CanaryShown(arm.arm, revision, arm.share)
    elif run.get("canary_arm"):
        canary = CanaryShown(str(run["canary_arm"]))
    forks = run.get("forks")
    return LabLinks(
        replay_of=replay_of,
        forked_from=forked_from,
        fork_turn=fork_turn,
        fork_input=spec.input if spec and forked_from else None,
        forks=[str(f) for f in forks] if isinstance(forks, list) else [],
        golden=_golden(run, events),
        divergence=_divergence(run, events),
        canary=canary,
    )
