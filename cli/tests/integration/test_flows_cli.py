"""`nexus flows apply|ls|show|history|rm` against a real core on a real nats-server and
PostgreSQL; invalid definitions are refused with one line naming file, step and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from nexus_core.app import CoreApp
from nexus_events.contract.documents import parse_flow
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import catalog_events_filter
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from tests.support.cli import cli_env, invoke, nexus

from nexus_cli.errors import ExitCode

FEATURE = Path(__file__).parents[3] / "examples" / "flows" / "feature.yaml"
AGENTS = ("planner", "implementer", "reviewer", "tester")
# A second flow, to show a directory applies every *.yaml / *.yml in it.
SOLO = "id: solo\nsteps:\n  - {id: only, kind: run, agent: tester, input: 'Test {{ input }}'}\n"


async def _agents(bus: Bus, *ids: str) -> None:
    for agent in ids:
        await apply_agent(
            bus, f"id: {agent}\nrole: {agent}\nmodel: {{name: m}}\nsystem_prompt: x\n"
        )


async def _flow_events(bus: Bus) -> list[str]:
    return [
        d.address.event
        async for d in bus.replay(CATALOG, filter_subject=catalog_events_filter("flow"))
    ]


async def test_apply_ls_show_history_rm(bus: Bus, core: CoreApp, nats_url: str, tmp_path: Path):
    await _agents(bus, *AGENTS)
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "feature.yaml").write_text(FEATURE.read_text())
    (flows / "solo.yml").write_text(SOLO)
    (flows / "README.md").write_text("not a flow")

    applied = await nexus(nats_url, tmp_path, "flows", "apply", str(flows))
    assert applied.exit_code == 0, applied.output
    assert "flow/feature applied revision 1" in applied.stdout
    assert "flow/solo applied revision 1" in applied.stdout

    listed = await nexus(nats_url, tmp_path, "flows", "ls", "-o", "json")
    assert [(f["definition"]["id"], f["revision"]) for f in json.loads(listed.stdout)["flows"]] == [
        ("feature", 1),
        ("solo", 1),
    ]
    table = await nexus(nats_url, tmp_path, "flows", "ls")
    assert "planner, implementer, reviewer, tester" in table.stdout

    # `show` prints YAML that applies back to the very same definition.
    shown = await nexus(nats_url, tmp_path, "flows", "show", "feature")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith("# flow/feature revision 1\n")
    assert parse_flow(shown.stdout) == parse_flow(FEATURE.read_text())

    changed = FEATURE.read_text().replace("max_rounds: 3", "max_rounds: 4")
    (flows / "feature.yaml").write_text(changed)
    again = await nexus(nats_url, tmp_path, "flows", "apply", str(flows / "feature.yaml"))
    assert again.exit_code == 0, again.output
    assert "flow/feature applied revision 2" in again.stdout
    old = await nexus(
        nats_url, tmp_path, "flows", "show", "feature", "--revision", "1", "-o", "json"
    )
    assert json.loads(old.stdout)["definition"]["steps"][1]["max_rounds"] == 3
    missing = await nexus(nats_url, tmp_path, "flows", "show", "feature", "--revision", "9")
    assert missing.exit_code == ExitCode.NOT_FOUND
    assert "no flow feature revision 9" in missing.stderr

    removed = await nexus(nats_url, tmp_path, "flows", "rm", "feature")
    assert removed.exit_code == 0, removed.output
    gone = await nexus(nats_url, tmp_path, "flows", "show", "feature")
    assert gone.exit_code == ExitCode.NOT_FOUND
    twice = await nexus(nats_url, tmp_path, "flows", "rm", "feature")
    assert twice.exit_code == ExitCode.NOT_FOUND

    history = await nexus(nats_url, tmp_path, "flows", "history", "feature", "-o", "json")
    entries = json.loads(history.stdout)["history"]
    assert [(e["event"], e["revision"]) for e in entries] == [
        ("applied", 1),
        ("applied", 2),
        ("deleted", 3),
    ]
    assert all(e["by"] and e["time"] for e in entries)
    human = await nexus(nats_url, tmp_path, "flows", "history", "feature")
    assert "deleted" in human.stdout
    nothing = await nexus(nats_url, tmp_path, "flows", "history", "nobody")
    assert nothing.exit_code == ExitCode.NOT_FOUND


def _feature(old: str, new: str) -> str:
    text = FEATURE.read_text()
    assert old in text, old
    return text.replace(old, new)


INVALID = {
    "bad-expression": (
        _feature('review.verdict == "request_changes"', "review.verdict =="),
        "step 'review': next[0].when: 'review.verdict ==' does not parse",
    ),
    "cycle-without-max-rounds": (
        _feature("    max_rounds: 3\n    on_max_rounds: more_rounds\n", ""),
        "step 'implement': a loop without max_rounds (implement -> review)",
    ),
    "unknown-field": (
        _feature("    agent: reviewer\n", "    agent: reviewer\n    agnet: reviewer\n"),
        "step 'review': agnet: Extra inputs are not permitted",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_definitions_are_one_line_exit_2_without_a_server(tmp_path: Path, case: str):
    text, expected = INVALID[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    # Nothing listens here: the document is refused before the CLI connects anywhere.
    result = invoke(cli_env("nats://127.0.0.1:1", tmp_path), "flows", "apply", str(path))
    assert result.exit_code == ExitCode.INVALID, result.output
    first, *rest = result.stderr.strip().splitlines()
    assert first.startswith(f"error: {path}: {expected}"), first
    assert [line for line in rest if not line.startswith("hint:")] == []


async def test_unknown_agent_and_partly_invalid_sets_publish_nothing(
    bus: Bus, core: CoreApp, nats_url: str, tmp_path: Path
):
    await _agents(bus, "planner", "reviewer", "tester")  # no implementer
    path = tmp_path / "feature.yaml"
    path.write_text(FEATURE.read_text())
    result = await nexus(nats_url, tmp_path, "flows", "apply", str(path))
    assert result.exit_code == ExitCode.INVALID, result.output
    first = result.stderr.strip().splitlines()[0]
    assert first == f"error: {path}: step 'implement': agent 'implementer' is not in the catalog"

    # A set with one good file and one bad one: none of it is published.
    flows = tmp_path / "set"
    flows.mkdir()
    (flows / "a.yaml").write_text(SOLO)
    (flows / "b.yaml").write_text(yaml.safe_dump({"id": "broken", "steps": []}))
    refused = await nexus(nats_url, tmp_path, "flows", "apply", str(flows), "-o", "json")
    assert refused.exit_code == ExitCode.INVALID
    error = json.loads(refused.stderr)["error"]
    assert error["message"].startswith(f"{flows / 'b.yaml'}: steps: ")
    assert await _flow_events(bus) == []
