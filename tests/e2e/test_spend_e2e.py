"""Budgets through the whole stack (docs/spend.md): real core, scheduler, spend service and
runners, the offline model reporting usage, every step through the CLI.

Ten runs of one team start together against a team budget worth three of them (`ask`): the
runs past it pause (`budget_paused`) and one ask reaches the approvers (a member of the team,
by NEXUS_TEAMS); while they wait the team's settled spend stays within the budget plus one
call per run, and core, the spend service, a runner (its run resumed) and then the scheduler
are killed with SIGKILL. The approval extends the budget and every run finishes: the settled
total equals the usage projection, which equals what the runs' own events say, and nothing
is left reserved. Beside it, a `stop` budget ends the run past it and a denied ask ends the
paused one, each `budget_exceeded` naming the scope.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from nexus_testing import eventually_blocking

from tests.e2e.conftest import RUN_WAIT, Stack

pytestmark = pytest.mark.timeout(420)

AGENT = """\
id: {agent}
role: implementer
team: {team}
model: {{name: gpt-4o-mini, max_output_tokens: 64}}
system_prompt: "[offline-model:lab-steps] You take notes."
tools: [read_file, write_file, finish]
"""
BUDGET = """\
id: {id}
scope: team:{team}
period: month
limits: {{cost_usd: {limit}}}
on_exceed: {on_exceed}
ask: {{extend_cost_usd: {extend}, approvers: ["team:{team}"], expires_in: 600}}
"""
RUNS = 10
# Seconds between two looks: each look is a CLI process (about a second of CPU), which the
# runs under test need too.
POLL = 1.0
T = TypeVar("T")


def _json(result: Any) -> Any:
    assert result.code == 0, result.stderr + result.stdout
    return json.loads(result.stdout)


def _apply_agent(stack: Stack, tmp: Path, agent: str, team: str) -> None:
    path = tmp / f"{agent}.yaml"
    path.write_text(AGENT.format(agent=agent, team=team))
    applied = stack.nexus("agents", "apply", "-f", str(path))
    assert applied.code == 0, applied.stderr


def _apply_budget(stack: Stack, tmp: Path, **fields: Any) -> None:
    path = tmp / f"{fields['id']}.yaml"
    path.write_text(BUDGET.format(**fields))
    applied = stack.nexus("budgets", "apply", str(path))
    assert applied.code == 0, applied.stderr + applied.stdout


def _start(stack: Stack, agent: str, n: int) -> list[str]:
    """`n` runs asked for at once, as n people (or a script) would."""

    def one(i: int) -> str:
        started = _json(stack.nexus("run", agent, "--input", f"notes {i}", "-o", "json"))
        return str(started["run_id"])

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(one, range(n)))


def _agent_runs(stack: Stack, agent: str) -> dict[str, dict[str, Any]]:
    """Every run of `agent` as core shows it, in one query."""
    listed = _json(stack.nexus("ps", "--all", "--agent", agent, "-o", "json"))["runs"]
    return {r["run_id"]: r for r in listed}


def _soon(probe: Callable[[], T]) -> Callable[[], T | None]:
    """`probe`, or None while what it reads is not there yet (its assert fails, or core is
    restarting under it): for `eventually_blocking`, which fails at once on an exception."""

    def tried() -> T | None:
        try:
            return probe()
        except (AssertionError, json.JSONDecodeError, KeyError):
            return None

    return tried


def _ended(stack: Stack, agent: str, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    runs = _agent_runs(stack, agent)
    assert set(run_ids) <= set(runs), runs
    live = [r for r in run_ids if runs[r]["status"] not in ("completed", "failed", "lost")]
    assert not live, {r: runs[r]["status"] for r in live}
    return {r: runs[r] for r in run_ids}


def _turn_costs(events: list[dict[str, Any]]) -> dict[int, float]:
    """What a run's own events say it spent: each turn once (the larger)."""
    costs: dict[int, float] = {}
    for event in events:
        body = event["body"]
        if event["event"] == "turn":
            costs[body["turn"]] = max(costs.get(body["turn"], 0.0), body["cost_usd"])
    return costs


def _standing(stack: Stack, budget_id: str) -> dict[str, Any]:
    view = _json(stack.nexus("budgets", "show", budget_id, "-o", "json"))
    standings = view["standings"]
    assert len(standings) == 1, standings
    standing: dict[str, Any] = standings[0]
    return standing


def _usage(stack: Stack, team: str) -> dict[str, Any]:
    report = _json(stack.nexus("usage", "--by", "team", "--team", team, "-o", "json"))
    total: dict[str, Any] = report["total"]
    return total


def _asks(stack: Stack, budget_id: str) -> list[dict[str, Any]]:
    listed = _json(stack.nexus("approvals", "ls", "-o", "json"))["approvals"]
    return [a for a in listed if a["tool"] == "budget_extend" and budget_id in a["summary"]]


def _kill_runner(stack: Stack, run_ids: list[str]) -> str | None:
    """SIGKILL the runner of one of `run_ids` still running (every process working in its
    run's directory: bubblewrap and the runner in it); its run id, or None if none runs."""
    runs = str((stack.home / "runs").resolve())
    for proc in psutil.process_iter(["cwd"]):
        cwd = proc.info.get("cwd") or ""
        run_id = next((r for r in run_ids if cwd.startswith(runs) and r in cwd), None)
        if run_id is None:
            continue
        for other in psutil.process_iter(["cwd"]):
            if run_id in (other.info.get("cwd") or ""):
                with contextlib.suppress(psutil.Error):
                    other.kill()
        return run_id
    return None


def _kill(stack: Stack, label: str) -> None:
    pid = next(p for name, p in stack.stack_pids().items() if name.startswith(f"{label}:"))
    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def run_cost(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> float:
    """What one run of the notes agent costs (the offline model's usage, priced)."""
    tmp = tmp_path_factory.mktemp("spend")
    _apply_agent(stack, tmp, "spend-calib", "spend-calib")
    ran = _json(
        stack.nexus(
            "run", "spend-calib", "--input", "notes", "--follow", "--wait", str(RUN_WAIT),
            "-o", "json", timeout=RUN_WAIT + 30,
        )
    )  # fmt: skip
    assert ran["status"] == "completed", ran
    cost = float(ran["cost_usd"])
    assert cost > 0
    return cost


def test_budgets_pause_ask_stop_and_settle_exactly_through_kills(
    stack: Stack, run_cost: float, tmp_path: Path
) -> None:
    """Three teams at once: ten runs against an `ask` budget worth three (approved), one
    against a `stop` budget and one against an `ask` budget that is denied, each worth half
    a run."""
    team, budget = "spend-ten", "spend-ten-monthly"
    for name in (team, "spend-stop", "spend-deny"):
        _apply_agent(stack, tmp_path, f"{name}-notes", name)
    limit = round(3 * run_cost, 6)
    _apply_budget(
        stack, tmp_path, id=budget, team=team, limit=limit, on_exceed="ask",
        extend=round(20 * run_cost, 6),
    )  # fmt: skip
    small = round(0.5 * run_cost, 6)  # reached halfway through a run
    _apply_budget(
        stack, tmp_path, id="spend-stop-cap", team="spend-stop", limit=small, on_exceed="stop",
        extend=0,
    )  # fmt: skip
    _apply_budget(
        stack, tmp_path, id="spend-deny-cap", team="spend-deny", limit=small, on_exceed="ask",
        extend=small,
    )  # fmt: skip
    with ThreadPoolExecutor(max_workers=3) as pool:
        starts = [
            pool.submit(_start, stack, f"{name}-notes", n)
            for name, n in ((team, RUNS), ("spend-stop", 1), ("spend-deny", 1))
        ]
        run_ids, stopped, denied = (f.result() for f in starts)

    # Past the budget the runs pause and one ask waits for the team.
    def paused_and_asked() -> tuple[dict[str, Any], dict[str, Any]]:
        asks, deny_asks = _asks(stack, budget), _asks(stack, "spend-deny-cap")
        assert len(asks) == 1, asks
        assert len(deny_asks) == 1, deny_asks
        runs = _agent_runs(stack, f"{team}-notes")
        assert any(runs[r]["budget_wait"] for r in run_ids if r in runs), runs
        return asks[0], deny_asks[0]

    ask, deny_ask = eventually_blocking(
        _soon(paused_and_asked), within=RUN_WAIT, interval=POLL, what="asks"
    )
    standing = _standing(stack, budget)
    assert standing["state"] == "asking", standing
    # Within the budget plus one call per run: no call was made unreserved (a call costs
    # less than a run of four).
    assert standing["spent_cost_usd"] <= limit + RUNS * run_cost + 1e-9
    runs = _agent_runs(stack, f"{team}-notes")
    assert sum(runs[r]["status"] == "completed" for r in run_ids) < RUNS

    # While they wait, core, the spend service and one paused runner die; once that run is
    # resumed (a scheduler restarted beside a dead runner would wait its heartbeat window
    # first), the scheduler dies too. Then the asks are answered.
    for label in ("core", "spend"):
        _kill(stack, label)
    killed = _kill_runner(stack, run_ids)
    if killed is not None:

        def resumed() -> bool:
            run = _agent_runs(stack, f"{team}-notes")[killed]
            return run["attempt"] > 1 or run["status"] == "completed"

        eventually_blocking(
            _soon(resumed), within=RUN_WAIT, interval=POLL, what=f"{killed} resumed"
        )
    _kill(stack, "scheduler")
    refused = stack.nexus("deny", deny_ask["run_id"], deny_ask["approval_id"])
    assert refused.code == 0, refused.stderr + refused.stdout
    approved = stack.nexus("approve", ask["run_id"], ask["approval_id"])
    assert approved.code == 0, approved.stderr + approved.stdout

    def all_ended() -> dict[str, dict[str, Any]]:
        return {
            **_ended(stack, f"{team}-notes", run_ids),
            **_ended(stack, "spend-stop-notes", stopped),
            **_ended(stack, "spend-deny-notes", denied),
        }

    ended = eventually_blocking(
        _soon(all_ended), within=RUN_WAIT * 2, interval=POLL, what="every run ended"
    )
    assert {ended[r]["status"] for r in run_ids} == {"completed"}, ended
    events = {r: stack.events(r) for r in run_ids}
    assert any(e["event"] == "budget_paused" for r in run_ids for e in events[r])
    # Past a stop budget, and past a denied ask: budget_exceeded, naming the scope.
    for ids, scope in ((stopped, "team:spend-stop"), (denied, "team:spend-deny")):
        over = [ended[r] for r in ids if ended[r]["status"] == "failed"]
        assert over, {r: ended[r]["status"] for r in ids}
        for run in over:
            assert run["reason"] == "budget_exceeded", run
            assert scope in run["message"], run

    # Nothing lost, nothing counted twice: events = usage = ledger; nothing left held.
    from_events = sum(sum(_turn_costs(events[r]).values()) for r in run_ids)

    def settled() -> tuple[dict[str, Any], dict[str, Any]]:
        usage = _usage(stack, team)
        standing = _standing(stack, budget)
        assert usage["runs"] == RUNS
        assert usage["cost_usd"] == pytest.approx(from_events, rel=1e-6)
        assert standing["spent_cost_usd"] == pytest.approx(from_events, rel=1e-6)
        assert standing["reserved_cost_usd"] == 0
        return usage, standing

    found = eventually_blocking(
        _soon(settled), within=60, interval=POLL, what="usage = ledger = events"
    )
    assert found is not None
    assert _standing(stack, "spend-deny-cap")["state"] == "denied"
    assert _standing(stack, "spend-stop-cap")["reserved_cost_usd"] == 0
