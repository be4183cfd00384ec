"""Every `apply` (agents, skills, flows) takes -f/--file, repeatable, with positional paths as
an alias; an agent apply retried inside the duplicate window stores one event, "A, B, A" still
lands, and core adds no revision for identical content outside the window. Real core, NATS
and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nexus_core.app import CoreApp
from nexus_events.contract.documents import parse_agent
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind, catalog_event, catalog_events_filter
from nexus_events.events import AgentApplied
from nexus_events.transport.bus import Bus
from tests.support.cli import nexus

from nexus_cli.errors import ExitCode


def _agent(agent_id: str, prompt: str = "x") -> str:
    return f"id: {agent_id}\nrole: tester\nmodel: {{name: m}}\nsystem_prompt: {prompt}\n"


SKILL = "---\nversion: '1'\ndescription: d\n---\nDo the thing.\n"
FLOW = (
    "id: {id}\nsteps:\n  - {{id: only, kind: run, agent: tester, input: 'Test {{{{ input }}}}'}}\n"
)


async def _events(bus: Bus, kind: str, item_id: str) -> list[str]:
    return [
        d.address.event
        async for d in bus.replay(CATALOG, filter_subject=catalog_events_filter(kind))
        if d.address.ids.get("id") == item_id
    ]


def _files(tmp_path: Path, name: str, contents: dict[str, str]) -> list[Path]:
    folder = tmp_path / name
    folder.mkdir()
    for file, text in contents.items():
        (folder / file).write_text(text)
    return [folder / file for file in contents]


@pytest.mark.parametrize(
    ("kind", "contents", "shown"),
    [
        ("agents", {"a.yaml": _agent("tester"), "b.yaml": _agent("other")}, ("tester", "other")),
        ("skills", {"lint.md": SKILL, "fmt.md": SKILL}, ("lint", "fmt")),
        ("flows", {"f.yaml": FLOW.format(id="f1"), "g.yaml": FLOW.format(id="f2")}, ("f1", "f2")),
    ],
)
async def test_every_apply_takes_repeatable_file_options_and_positional_paths(
    bus: Bus,
    core: CoreApp,
    nats_url: str,
    tmp_path: Path,
    kind: str,
    contents: dict[str, str],
    shown: tuple[str, str],
) -> None:
    if kind == "flows":
        await nexus(nats_url, tmp_path, "agents", "apply", "-f", _write_tester(tmp_path))
    first, second = _files(tmp_path, kind, contents)
    by_option = await nexus(
        nats_url, tmp_path, kind, "apply", "-f", str(first), "--file", str(second), "-o", "json"
    )
    assert by_option.exit_code == 0, by_option.output
    applied = json.loads(by_option.stdout)["applied"]
    assert [a["file"] for a in applied] == [str(first), str(second)]
    by_position = await nexus(nats_url, tmp_path, kind, "apply", str(first.parent))
    assert by_position.exit_code == 0, by_position.output
    for item in shown:
        assert item in by_position.stdout
    nothing = await nexus(nats_url, tmp_path, kind, "apply")
    assert nothing.exit_code == ExitCode.INVALID
    assert "name the documents to apply" in nothing.stderr


def _write_tester(tmp_path: Path) -> str:
    path = tmp_path / "tester.yaml"
    path.write_text(_agent("tester"))
    return str(path)


async def test_a_retried_apply_stores_one_event_and_a_b_a_still_lands(
    bus: Bus, core: CoreApp, nats_url: str, tmp_path: Path
) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(_agent("retry", "first"))
    b.write_text(_agent("retry", "second"))
    for _ in range(2):  # the same apply twice inside the duplicate window: a retry
        result = await nexus(nats_url, tmp_path, "agents", "apply", "-f", str(a))
        assert result.exit_code == 0, result.output
    assert await _events(bus, "agent", "retry") == ["applied"]

    for path in (b, a, a):  # A, B, A: the second A is a change; the third A a retry of it
        result = await nexus(nats_url, tmp_path, "agents", "apply", "-f", str(path))
        assert result.exit_code == 0, result.output
    assert await _events(bus, "agent", "retry") == ["applied"] * 3
    shown = await nexus(nats_url, tmp_path, "agents", "show", "retry", "-o", "json")
    assert json.loads(shown.stdout)["revision"] == 3
    assert json.loads(shown.stdout)["definition"]["system_prompt"] == "first"


async def test_identical_content_outside_the_window_adds_no_revision(
    bus: Bus, core: CoreApp, nats_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "same.yaml"
    path.write_text(_agent("same"))
    assert (await nexus(nats_url, tmp_path, "agents", "apply", "-f", str(path))).exit_code == 0
    # Past the duplicate window the stream stores the same content again under a new id.
    await bus.publish(
        catalog_event(CatalogKind.AGENT, "same", "applied"),
        AgentApplied(definition=parse_agent(path.read_text())),
        msg_id="catalog:outside-the-window",
    )
    changed = tmp_path / "changed.yaml"
    changed.write_text(_agent("same", "changed"))
    # A later change is revision 2: the identical event in between added none.
    assert (await nexus(nats_url, tmp_path, "agents", "apply", "-f", str(changed))).exit_code == 0
    shown = await nexus(nats_url, tmp_path, "agents", "show", "same", "-o", "json")
    assert json.loads(shown.stdout)["revision"] == 2
    assert await _events(bus, "agent", "same") == ["applied"] * 3
