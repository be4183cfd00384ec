"""The lab through the whole stack (docs/lab.md): `nexus replay`, `nexus fork`, `nexus golden`,
`nexus eval` and an agent's canary, with the real core, scheduler, runners and lab service,
and the offline model answering per agent revision (each revision's prompt names its script).

A recorded run of the `lab-steps` script (four turns: a file written, the on-demand skill
read, a second file written from what the skill said, finish) is replayed unchanged (no model
call, the same tool calls), replayed with a changed prompt (first divergence at turn 1) and
with a changed skill (at turn 3, where the agent read it), and forked at turn 1 (the workspace
restored from the source's checkpoint). A suite of 5 cases x 2 revisions reports
the pass rates the two scripted revisions produce (5 x 2 x 3, with scripted endings, is the
lab service's own integration test); a canary splits runs by the draw core makes
from each run id and promotes when its policy says.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest
from nexus_cli.devstack.offline_model.lab_scripts import STEP1_FILE, STEP3_FILE
from nexus_testing import eventually_blocking

from tests.e2e.conftest import RUN_WAIT, Stack

pytestmark = pytest.mark.timeout(420)

SKILL_V1 = """\
---
name: lab-style
version: "1"
description: How the lab agent writes its notes.
---
Write short notes.
"""
SKILL_V2 = SKILL_V1.replace("Write short notes.", "Write short notes, in lower case, always.")
AGENT = """\
id: lab-notes
role: implementer
model: {{name: gpt-4o-mini}}
system_prompt: "[offline-model:lab-steps] {prompt}"
skills: [{{name: lab-style, load: on_demand}}]
tools: [read_file, write_file, finish]
"""
EVAL_AGENT = """\
id: lab-answer
role: implementer
model: {{name: gpt-4o-mini}}
system_prompt: "[offline-model:{script}] You answer."
tools: [finish]
"""
# Two easy cases of five: eval-strict answers those right, eval-lenient all of them.
SUITE = """\
id: lab-answers
agent: lab-answer
graders:
  - {kind: max_turns, turns: 3}
cases:
""" + "".join(
    f"  - id: {case}\n    input: 'answer: {n}{easy}'\n"
    f"    graders: [{{kind: details_match, field: answer, equals: '{n}'}}]\n"
    for case, n, easy in (
        ("one", 1, " [easy]"), ("two", 2, ""), ("three", 3, " [easy]"), ("four", 4, ""),
        ("five", 5, ""),
    )
)  # fmt: skip
CANARY = """\
id: lab-canary
role: implementer
model: {{name: gpt-4o-mini}}
system_prompt: "[offline-model:eval-lenient] {prompt}"
tools: [finish]
{canary}"""


def _apply(stack: Stack, kind: str, path: Path, text: str) -> None:
    path.write_text(text)
    args = (kind, "apply", str(path)) if kind == "eval" else (kind, "apply", "-f", str(path))
    applied = stack.nexus(*args)
    assert applied.code == 0, applied.stdout + applied.stderr


def _json(result: Any) -> dict[str, Any]:
    assert result.code == 0, result.stdout + result.stderr
    out: dict[str, Any] = result.json()
    return out


def _run(stack: Stack, run_id: str) -> dict[str, Any]:
    """The run as core's agent_runs shows it (`nexus attach`)."""
    run: dict[str, Any] = _json(stack.nexus("attach", run_id, "-o", "json"))["run"]
    return run


def _events(stack: Stack, run_id: str, name: str) -> list[dict[str, Any]]:
    return [e["body"] for e in stack.events(run_id) if e["event"] == name]


def _calls(stack: Stack, run_id: str) -> list[tuple[int, str, Any]]:
    return [(b["turn"], b["tool"], b["arguments"]) for b in _events(stack, run_id, "tool_called")]


@pytest.fixture(scope="module")
def recorded(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The source run: lab-notes revision 1 with lab-style revision 1, on a small repository
    whose tests pass (the runner's acceptance check runs them)."""
    tmp = tmp_path_factory.mktemp("lab")
    _apply(stack, "skills", tmp / "lab-style.md", SKILL_V1)
    _apply(stack, "agents", tmp / "lab-notes.yaml", AGENT.format(prompt="You take notes."))
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("Notes on the calculator.\n")
    (repo / "test_sum.py").write_text("def test_sum():\n    assert sum([1, 2]) == 3\n")
    git = ["git", "-C", str(repo), "-c", "user.name=e2e", "-c", "user.email=e2e@nexus.local"]
    subprocess.run([*git, "init", "--quiet", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "calc"], check=True)
    ran = stack.nexus(
        "run", "lab-notes", "--repo", str(repo), "--input", "Take notes on the calculator.",
        "--follow", "--wait", str(RUN_WAIT), "-o", "json", timeout=RUN_WAIT + 30,
    )  # fmt: skip
    view = _json(ran)
    assert (view["status"], view["turns"]) == ("completed", 4), view
    run_id: str = view["run_id"]
    return run_id


def _replay(stack: Stack, *args: str) -> dict[str, Any]:
    return _json(stack.nexus("replay", *args, "--wait", "-o", "json", timeout=RUN_WAIT + 30))


def test_a_replay_of_the_unchanged_agent_reproduces_the_run(stack: Stack, recorded: str) -> None:
    # The source's revisions, named: other tests here apply newer ones.
    replay = _replay(stack, recorded, "--agent-revision", "1", "--skill", "lab-style@1")
    assert (replay["status"], replay["divergence"]) == ("completed", None), replay
    rid = replay["run_id"]
    turns = _events(stack, rid, "turn")
    assert [t["turn"] for t in turns] == [1, 2, 3, 4]
    assert all(t["replayed"] for t in turns)  # every reply from the recording: no model call
    assert sum(t["tokens_in"] + t["tokens_out"] for t in turns) == 0
    assert _calls(stack, rid) == _calls(stack, recorded)
    results = [(b["tool"], b["ok"], b["output"]) for b in _events(stack, rid, "tool_result")]
    source = [(b["tool"], b["ok"], b["output"]) for b in _events(stack, recorded, "tool_result")]
    assert results == source
    assert _run(stack, rid)["replay_of"] == recorded
    assert rid in _run(stack, recorded)["forks"]


def test_a_changed_prompt_diverges_at_turn_1(stack: Stack, recorded: str, tmp_path: Path) -> None:
    _apply(stack, "agents", tmp_path / "a.yaml", AGENT.format(prompt="You take careful notes."))
    replay = _replay(stack, recorded, "--agent-revision", "2")
    assert (replay["status"], replay["reason"]) == ("completed", "diverged"), replay
    assert (replay["divergence"]["turn"], replay["divergence"]["kind"]) == (1, "system_prompt")
    assert _events(stack, replay["run_id"], "turn") == []  # stopped before any model call


def test_a_changed_skill_diverges_where_the_agent_read_it(
    stack: Stack, recorded: str, tmp_path: Path
) -> None:
    _apply(stack, "skills", tmp_path / "lab-style.md", SKILL_V2)
    replay = _replay(stack, recorded, "--agent-revision", "1", "--skill", "lab-style@2")
    assert replay["divergence"] is not None, replay
    assert (replay["divergence"]["turn"], replay["divergence"]["kind"]) == (3, "tool_result")
    turns = _events(stack, replay["run_id"], "turn")
    assert [(t["turn"], t["replayed"]) for t in turns] == [(1, True), (2, True)]


def test_a_fork_restores_the_workspace_of_its_turn_and_goes_on(stack: Stack, recorded: str) -> None:
    forked = _json(
        stack.nexus(
            "fork", recorded, "--at-turn", "1", "--agent-revision", "1",
            "--input", "Keep going.", "--wait", "-o", "json", timeout=RUN_WAIT + 30,
        )
    )  # fmt: skip
    assert forked["status"] == "completed", forked
    fid = forked["run_id"]
    # Turn 1 is the source's: the fork's own turns go on from 2, live.
    turns = _events(stack, fid, "turn")
    assert [t["turn"] for t in turns] == [2, 3, 4]
    assert not any(t["replayed"] for t in turns)
    # notes/step1.txt was written by the source at turn 1, not by the fork: it is in the
    # fork's work because its workspace is the source's checkpoint of turn 1.
    assert STEP1_FILE not in [a.get("path") for _, tool, a in _calls(stack, fid)]
    completed = _events(stack, fid, "completed")[0]
    assert {STEP1_FILE, STEP3_FILE} <= set(completed["result"]["files_changed"])
    shown = _run(stack, fid)
    assert (shown["forked_from"], shown["fork_turn"]) == (recorded, 1)


def test_lab_refusals_are_one_line(stack: Stack, recorded: str) -> None:
    past = stack.nexus("fork", recorded, "--at-turn", "9")
    assert past.code == 2
    assert len(past.stderr.strip().splitlines()) == 1, past.stderr
    ghost = stack.nexus("replay", "no-such-run")
    assert ghost.code == 2
    assert len(ghost.stderr.strip().splitlines()) == 1, ghost.stderr


def test_golden_marks_a_completed_run(stack: Stack, recorded: str) -> None:
    assert stack.nexus("golden", recorded, "--note", "how notes are taken").code == 0
    eventually_blocking(lambda: _run(stack, recorded), lambda v: v["golden"], within=30)
    listed = _json(stack.nexus("ps", "--golden", "-o", "json"))["runs"]
    assert [r["run_id"] for r in listed] == [recorded]


def test_an_eval_suite_reports_the_pass_rates_of_its_revisions(
    stack: Stack, tmp_path: Path
) -> None:
    _apply(stack, "agents", tmp_path / "a1.yaml", EVAL_AGENT.format(script="eval-strict"))
    _apply(stack, "agents", tmp_path / "a2.yaml", EVAL_AGENT.format(script="eval-lenient"))
    _apply(stack, "eval", tmp_path / "suite.yaml", SUITE)
    ran = stack.nexus(
        "eval", "run", "lab-answers", "--agent", "lab-answer@1", "--agent", "lab-answer@2",
        "--trials", "1", "--concurrency", "6", "--wait", "-o", "json", timeout=300,
    )  # fmt: skip
    report = _json(ran)
    assert report["status"] == "completed", report
    rates = {(r["revision"], r["graded"], r["passed"]) for r in report["revisions"]}
    # eval-strict answers the 2 easy cases of 5 right in each trial; eval-lenient all.
    assert rates == {(1, 5, 2), (2, 5, 5)}
    assert sorted(report["flipped"]) == ["five", "four", "two"]
    strict = next(r for r in report["revisions"] if r["revision"] == 1)
    assert strict["ci_low"] < 0.4 < strict["ci_high"]


def _candidate(run_id: str, share: float) -> bool:
    """Core's canary draw (nexus_core.lab_assembly.canary_draw): the first 8 bytes of the run
    id's SHA-256 as a fraction of 2**64."""
    digest = hashlib.sha256(run_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def test_a_canary_routes_by_its_draw_and_promotes(stack: Stack, tmp_path: Path) -> None:
    _apply(stack, "agents", tmp_path / "c1.yaml", CANARY.format(prompt="One.", canary=""))
    _apply(stack, "agents", tmp_path / "c2.yaml", CANARY.format(prompt="Two.", canary=""))
    policy = (
        "canary:\n  revision: 2\n  share: 0.5\n"
        "  promote_when: {min_runs: 2, max_success_drop: 0.0}\n"
        "  rollback_when: {min_runs: 2, min_success_rate: 0.5}\n"
    )
    _apply(stack, "agents", tmp_path / "c3.yaml", CANARY.format(prompt="One.", canary=policy))
    ids = [f"lab-canary-e2e-{n}" for n in range(12)]
    arms = {rid: "candidate" if _candidate(rid, 0.5) else "current" for rid in ids}
    picked = [r for r in ids if arms[r] == "candidate"][:2]
    picked += [r for r in ids if arms[r] == "current"][:2]
    assert len(picked) == 4  # the draw gives each arm two of these ids
    for rid in picked:  # at once: the scheduler runs them side by side
        started = stack.nexus(
            "run", "lab-canary", "--run-id", rid, "--input", "answer: 7", "--bg", "-o", "json"
        )  # fmt: skip
        assert started.code == 0, started.stderr
    for rid in picked:
        ended = eventually_blocking(
            lambda rid=rid: _run(stack, rid), lambda v: v["status"] == "completed", within=RUN_WAIT
        )
        assert ended["canary_arm"] == arms[rid]
        prepared = _events(stack, rid, "prepared")[0]["config"]
        assert prepared["canary"]["arm"] == arms[rid]
        assert prepared["catalog_revisions"]["agent/lab-canary"] == (
            2 if arms[rid] == "candidate" else 3
        )
    shown = eventually_blocking(
        lambda: _json(stack.nexus("agents", "show", "lab-canary", "-o", "json")),
        lambda v: v["revision"] == 4,
        within=60,
    )
    # Promoted: revision 4 is the candidate's definition, without a canary.
    assert shown["definition"]["system_prompt"].endswith("Two.")
    assert shown["definition"].get("canary") is None
    assert (shown["canary"] or {}).get("decision") == "promote"
