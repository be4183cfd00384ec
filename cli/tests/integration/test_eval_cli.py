"""`nexus eval ...` on a real nats-server: suites land on NEXUS_CATALOG (a bad one is one
line and nothing published), `eval run` publishes EvalRequested on the `new` token and prints
the id the lab's first event gives it, --wait follows NEXUS_EVALS, and the lab's queries fail
with one line when no lab answers. (The lab itself is services/lab; its queries' report is
rendered by nexus_cli.evalview, tested in cli/tests/unit/test_evalview.py.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import CATALOG, EVALS
from nexus_events.events import (
    EvalAccepted,
    EvalApplied,
    EvalDeleted,
    EvalFailed,
    EvalRequested,
)
from nexus_events.events.evals import AgentRevision, EvalEvent
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.support.cli import nexus

from nexus_cli.client import whoami

from .test_flow_runs_cli import one_error_line

ROOT = Path(__file__).resolve().parents[3]

SUITE = """
id: smoke
description: {description}
agent: impl
cases:
  - id: one
    input: do it
    graders:
      - kind: {kind}
        turns: 3
"""


async def catalog(bus: Bus) -> list[Decoded]:
    return [
        d async for d in bus.replay(CATALOG, filter_subject=subjects.catalog_events_filter("eval"))
    ]


async def evals(bus: Bus) -> list[Decoded]:
    return [d async for d in bus.replay(EVALS, filter_subject=subjects.eval_events_filter())]


def write(tmp_path: Path, kind: str = "max_turns", description: str = "first") -> Path:
    folder = tmp_path / "evals"
    folder.mkdir(exist_ok=True)
    (folder / "smoke.yaml").write_text(SUITE.format(kind=kind, description=description))
    return folder


async def test_apply_publishes_each_suite_and_ls_history_delete_read_the_catalog(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    folder = write(tmp_path)
    applied = await nexus(
        nats_url, tmp_path, "eval", "apply", str(folder), "-f", str(ROOT / "examples/evals"),
        "-o", "json",
    )  # fmt: skip
    assert applied.exit_code == 0, applied.output
    assert {a["id"] for a in json.loads(applied.stdout)["applied"]} == {
        "smoke",
        "implementer-smoke",
    }
    stored = await catalog(bus)
    assert {d.address.ids["id"] for d in stored} == {"smoke", "implementer-smoke"}
    smoke = next(d.event for d in stored if d.address.ids["id"] == "smoke")
    assert isinstance(smoke, EvalApplied)
    assert (smoke.suite.agent, smoke.applied_by) == ("impl", whoami())
    assert smoke.suite.cases[0].graders[0].kind == "max_turns"

    # A second apply of a changed suite is its revision 2; ls shows the latest.
    write(tmp_path, description="second")
    again = await nexus(nats_url, tmp_path, "eval", "apply", "-f", str(folder))
    assert again.exit_code == 0, again.output
    assert again.stdout.strip() == f"eval/smoke applied ({folder / 'smoke.yaml'})"
    ls = await nexus(nats_url, tmp_path, "eval", "ls", "-o", "json")
    suites = {s["suite"]["id"]: s for s in json.loads(ls.stdout)["suites"]}
    assert (suites["smoke"]["revision"], suites["smoke"]["suite"]["description"]) == (
        2,
        "second",
    )
    table = await nexus(nats_url, tmp_path, "eval", "ls")
    assert "implementer-smoke" in table.stdout
    assert "max_turns" in table.stdout

    history = await nexus(nats_url, tmp_path, "eval", "history", "smoke", "-o", "json")
    assert [e["event"] for e in json.loads(history.stdout)["history"]] == ["applied", "applied"]

    deleted = await nexus(nats_url, tmp_path, "eval", "delete", "smoke")
    assert deleted.exit_code == 0, deleted.output
    assert isinstance((await catalog(bus))[-1].event, EvalDeleted)
    after = await nexus(nats_url, tmp_path, "eval", "ls", "-o", "json")
    assert [s["suite"]["id"] for s in json.loads(after.stdout)["suites"]] == ["implementer-smoke"]

    missing = await nexus(nats_url, tmp_path, "eval", "delete", "nope")
    assert missing.exit_code == 3
    one_error_line(missing.stderr, "no suite 'nope'")
    unknown = await nexus(nats_url, tmp_path, "eval", "history", "nope")
    assert unknown.exit_code == 3


async def test_a_suite_with_an_unknown_grader_is_one_line_exit_2_and_nothing_published(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    good = tmp_path / "good"
    good.mkdir()
    (good / "a.yaml").write_text(SUITE.format(kind="max_turns", description="ok"))
    bad = write(tmp_path, kind="vibes") / "smoke.yaml"
    result = await nexus(nats_url, tmp_path, "eval", "apply", str(good), str(bad))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {bad}: cases[0].graders[0].kind: unknown grader kind 'vibes' (one of: "
        "completed, tests_pass, details_match, reviewer, max_cost, max_turns, forbidden_tools)"
    ]
    assert await catalog(bus) == []


async def _request(bus: Bus) -> Decoded:
    """The CLI's request, once it is stored on the `new` token."""
    found: list[Decoded] = []

    async def stored() -> bool:
        found[:] = [
            d for d in await evals(bus) if d.address.ids["eval_run_id"] == subjects.NEW_RUN_TOKEN
        ]
        return len(found) == 1

    await eventually(stored, what="the CLI's eval request")
    return found[0]


def accepted() -> EvalAccepted:
    return EvalAccepted(
        suite="smoke", suite_revision=2, cases=["one", "two"],
        revisions=[AgentRevision.parse("impl@3"), AgentRevision.parse("impl@4")],
        trials=3, concurrency=2,
    )  # fmt: skip


async def test_run_publishes_the_request_and_prints_the_id_the_lab_gives_it(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    cmd = asyncio.create_task(
        nexus(
            nats_url, tmp_path, "--timeout", "20", "eval", "run", "smoke", "--agent", "impl@3",
            "--agent", "impl@4", "--trials", "3", "--concurrency", "2", "-o", "json",
        )
    )  # fmt: skip
    request = await _request(bus)
    assert isinstance(request.event, EvalRequested)
    assert (request.event.suite, request.event.agents, request.event.trials) == (
        "smoke",
        ["impl@3", "impl@4"],
        3,
    )
    assert (request.event.concurrency, request.event.requested_by) == (2, whoami())
    # Another request's eval run is not this one's; the lab's answer to this one names it
    # as its cause (as the flows service does for a `new` flow request).
    await bus.publish(
        subjects.eval_event("ev-other", EvalEvent.ACCEPTED), accepted(), causation_id="x"
    )
    await bus.publish(
        subjects.eval_event("ev-mine", EvalEvent.ACCEPTED),
        accepted(),
        causation_id=request.envelope.event_id,
        correlation_id=request.envelope.correlation_id,
    )
    result = await asyncio.wait_for(cmd, 30)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"eval_run_id": "ev-mine", "suite": "smoke"}


async def test_run_wait_follows_the_eval_run_and_exits_1_when_it_fails(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    cmd = asyncio.create_task(
        nexus(
            nats_url, tmp_path, "--timeout", "20", "eval", "run", "nope", "-a", "impl@1", "--wait"
        )
    )
    request = await _request(bus)
    await bus.publish(
        subjects.eval_event("ev-bad", EvalEvent.FAILED),
        EvalFailed(reason="unknown_suite", message="no suite 'nope'"),
        causation_id=request.envelope.event_id,
    )
    result = await asyncio.wait_for(cmd, 30)
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines() == [
        "eval run ev-bad requested",
        "failed (unknown_suite): no suite 'nope'",
    ]


async def test_bad_requests_are_one_line_and_publish_nothing(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    for args, text in (
        (("smoke",), "name the revisions to compare"),
        (("smoke", "--agent", "impl"), "write an agent revision as AGENT@N"),
        (("smoke", "--agent", "impl@0"), "write an agent revision as AGENT@N"),
        (("smoke", "-a", "impl@1", "-a", "impl@1"), "an agent revision is named twice"),
        (("no good", "-a", "impl@1"), "invalid suite id"),
    ):
        result = await nexus(nats_url, tmp_path, "eval", "run", *args)
        assert result.exit_code == 2, (args, result.output)
        one_error_line(result.stderr, text)
    assert await evals(bus) == []


async def test_without_a_lab_run_times_out_and_the_queries_say_it_is_not_running(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    waited = await nexus(nats_url, tmp_path, "--timeout", "1", "eval", "run", "s", "-a", "a@1")
    assert waited.exit_code == 5, waited.output
    one_error_line(waited.stderr, "the eval request was stored but the lab did not take it up")
    assert len(await evals(bus)) == 1  # stored for when the lab is back
    for args in (("show", "ev-1"), ("ls-runs",), ("ls-runs", "--suite", "s")):
        down = await nexus(nats_url, tmp_path, "eval", *args)
        assert down.exit_code == 4, down.output
        one_error_line(down.stderr, "the lab is not running")
