"""Flow documents: `parse_flow` reports every error located by step id and field, the way
`nexus flows apply` prints it (``step 'review': next[0].when``), never by list index."""

from __future__ import annotations

from pathlib import Path

import pytest
from nexus_events.contract.documents import WHOLE, parse_flow
from nexus_events.errors import DocumentInvalid

FEATURE = (Path(__file__).parents[4] / "examples" / "flows" / "feature.yaml").read_text()


def _errors(text: str) -> list[tuple[str, str]]:
    with pytest.raises(DocumentInvalid) as info:
        parse_flow(text)
    assert info.value.kind == "flow"
    return [(e.loc, e.msg) for e in info.value.errors]


def test_the_example_flow_parses():
    flow = parse_flow(FEATURE)
    assert flow.agents() == ["planner", "implementer", "reviewer", "tester"]


@pytest.mark.parametrize(
    ("text", "loc", "fragment"),
    [
        (
            FEATURE.replace('review.verdict == "request_changes"', "review.verdict =="),
            "step 'review': next[0].when",
            "'review.verdict ==' does not parse",
        ),
        (
            FEATURE.replace("    max_rounds: 3\n    on_max_rounds: more_rounds\n", ""),
            "step 'implement'",
            "a loop without max_rounds (implement -> review)",
        ),
        (FEATURE.replace("kind: gate", "kind: vote"), "step 'more_rounds': kind", "'vote'"),
        (FEATURE.replace("to: test", "to: tset"), "step 'review'", "next[1].to: no step 'tset'"),
        (FEATURE + "owner: me\n", "owner", "Extra inputs are not permitted"),
        (FEATURE.replace("id: test", "id: plan"), "steps", "duplicate step id(s): plan"),
        (
            "id: w\nsteps:\n  - {id: pause, kind: wait}\n",
            "step 'pause'",
            "exactly one of timer, event",
        ),
        (
            "id: m\nsteps:\n  - {kind: map, over: 'x', agent: a, join: {quorum: 0}}\n",
            "steps[0]: id",
            "Field required",
        ),
        ("- just a list\n", WHOLE, "must be a mapping"),
    ],
    ids=[
        "expression",
        "unbounded-loop",
        "unknown-kind",
        "route-to-nowhere",
        "unknown-top-field",
        "duplicate-step",
        "wait-needs-one",
        "no-step-id",
        "not-a-mapping",
    ],
)
def test_errors_name_the_step_and_field(text: str, loc: str, fragment: str):
    errors = _errors(text)
    assert any(got == loc and fragment in msg for got, msg in errors), errors
    assert not any(msg.startswith("Value error") for _, msg in errors), errors


def test_every_bad_step_is_reported_at_once():
    text = "id: x\nsteps:\n  - {id: a, kind: run, agent: q, bogus: 1}\n  - {id: b, kind: wait}\n"
    assert [loc for loc, _ in _errors(text)] == ["step 'a': bogus", "step 'b'"]
