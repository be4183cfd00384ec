"""Budgets through the whole stack (docs/spend.md): real core, scheduler, spend service and
runners, the offline model reporting usage, every step through the CLI.

Ten runs of one team start together against a team budget worth three of them (`ask`): the
runs past it pause (`budget_paused`) and one ask reaches the approvers (a member of the team,
by NEXUS_TEAMS); while they wait the team's settled spend stays within the budget plus one
call per run. The approval extends the budget and every run finishes, while core, the
scheduler, the spend service and a runner are killed with SIGKILL: afterwards the settled
total equals the usage projection, which equals what the runs' own events say, and nothing
is left reserved. Beside it, a `stop` budget ends the runs past it and a denied ask ends the
paused ones, each `budget_exceeded` naming the scope.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

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


def _kill(stack: Stack, label: str) -> None:
    pid = next(p for name, p in stack.stack_pids().items() if name.startswith(f"{label}:"))
    os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
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


def test_ten_runs_against_a_budget_worth_three_pause_ask_and_finish_when_extended(
    stack: Stack, run_cost: float, tmp_path: Path
) -> None:
    team, budget = "spend-ten", "spend-ten-monthly"
    _apply_agent(stack, tmp_path, "spend-ten-notes", team)
    limit = round(3 * run_cost, 6)
    _apply_budget(
        stack, tmp_path, id=budget, team=team, limit=limit, on_exceed="ask",
        extend=round(20 * run_cost, 6),
    )  # fmt: skip
    run_ids = _start(stack, "spend-ten-notes", RUNS)

    # Past the budget the runs pause and one ask waits for the team.
    def paused_and_asked() -> list[dict[str, Any]]:
        asks = _asks(stack, budget)
        assert len(asks) == 1, asks
        runs = _agent_runs(stack, "spend-ten-notes")
        assert any(runs[r]["budget_wait"] for r in run_ids if r in runs), runs
        return asks

    asks = eventually_blocking(_soon(paused_and_asked), within=RUN_WAIT, what="an ask")
    standing = _standing(stack, budget)
    assert standing["state"] == "asking", standing
    # Within the budget plus one call per run: no call was made unreserved (a call costs
    # less than a run of four).
    assert standing["spent_cost_usd"] <= limit + RUNS * run_cost + 1e-9
    runs = _agent_runs(stack, "spend-ten-notes")
    assert sum(runs[r]["status"] == "completed" for r in run_ids) < RUNS

    ask = asks[0]
    approved = stack.nexus("approve", ask["run_id"], ask["approval_id"])
    assert approved.code == 0, approved.stderr + approved.stdout
    # The runs go on while core, the spend service and a runner die under them; the
    # scheduler dies once the killed runner's run is resumed (a scheduler restarted beside a
    # dead runner would wait its heartbeat window before resuming it).
    for label in ("core", "spend"):
        _kill(stack, label)
    if any(label.startswith("runner:") for label in stack.stack_pids()):
        _kill(stack, "runner")
        eventually_blocking(
            _soon(
                lambda: any(
                    v["attempt"] > 1 for v in _agent_runs(stack, "spend-ten-notes").values()
                )
            ),
            within=RUN_WAIT,
            what="the killed runner's run resumed",
        )
    _kill(stack, "scheduler")

    runs = eventually_blocking(
        _soon(lambda: _ended(stack, "spend-ten-notes", run_ids)),
        within=RUN_WAIT * 2,
        what="every run ended",
    )
    assert {v["status"] for v in runs.values()} == {"completed"}, runs
    events = {r: stack.events(r) for r in run_ids}
    assert any(e["event"] == "budget_paused" for r in run_ids for e in events[r])

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

    found = eventually_blocking(_soon(settled), within=60, what="usage = ledger = events")
    assert found is not None


def test_a_stop_budget_ends_the_runs_past_it_and_a_denied_ask_the_paused_ones(
    stack: Stack, run_cost: float, tmp_path: Path
) -> None:
    for team in ("spend-stop", "spend-deny"):
        _apply_agent(stack, tmp_path, f"{team}-notes", team)
    limit = round(1.5 * run_cost, 6)
    _apply_budget(
        stack, tmp_path, id="spend-stop-cap", team="spend-stop", limit=limit, on_exceed="stop",
        extend=0,
    )  # fmt: skip
    _apply_budget(
        stack, tmp_path, id="spend-deny-cap", team="spend-deny", limit=limit, on_exceed="ask",
        extend=limit,
    )  # fmt: skip
    stopped = _start(stack, "spend-stop-notes", 3)
    denied = _start(stack, "spend-deny-notes", 3)

    asks = eventually_blocking(
        _soon(lambda: _asks(stack, "spend-deny-cap")), within=RUN_WAIT, what="an ask"
    )
    refused = stack.nexus("deny", asks[0]["run_id"], asks[0]["approval_id"])
    assert refused.code == 0, refused.stderr + refused.stdout

    def both_ended() -> dict[str, dict[str, Any]]:
        return {
            **_ended(stack, "spend-stop-notes", stopped),
            **_ended(stack, "spend-deny-notes", denied),
        }

    runs = eventually_blocking(_soon(both_ended), within=RUN_WAIT * 2, what="runs ended")
    for ids, scope in ((stopped, "team:spend-stop"), (denied, "team:spend-deny")):
        over = [runs[r] for r in ids if runs[r]["status"] == "failed"]
        assert over, {r: runs[r]["status"] for r in ids}
        for run in over:
            assert run["reason"] == "budget_exceeded", run
            assert scope in run["message"], run
    assert _standing(stack, "spend-deny-cap")["state"] == "denied"
    assert _standing(stack, "spend-stop-cap")["reserved_cost_usd"] == 0
