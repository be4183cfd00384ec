"""An agent's canary standing as its catalog page shows it (core's AgentView.canary: each
arm's runs, success rate and mean cost, the decision and its rule), and a bad standing from
core as a 502 naming the field. Core does not fill AgentView.canary yet, so the section is
rendered here from the contract's model."""

from __future__ import annotations

import pytest
from nexus_events.events.queries import CanaryArmView, CanaryView

from nexus_console.canary_standing import canary_view
from nexus_console.reads import QueryError
from nexus_console.rendering import environment, render_text


def _item(canary: CanaryView | None) -> str:
    return render_text(
        environment(), "catalog/_item.html", kind="agent", item_id="implementer", revision=3,
        yaml="id: implementer\n", shown=None, history=[], diff=None, a=None, b=None,
        path="/catalog/agents/implementer", canary=canary,
    )  # fmt: skip


def _standing(decision: str | None = None, rule: str | None = None) -> CanaryView:
    return CanaryView(
        candidate=CanaryArmView(revision=5, runs=7, succeeded=6, success_rate=6 / 7,
                                mean_cost_usd=0.0125, mean_turns=3.25),
        current=CanaryArmView(revision=4, runs=13, succeeded=13, success_rate=1.0,
                              mean_cost_usd=0.01, mean_turns=3.0),
        share=0.25, decision=decision, rule=rule,
    )  # fmt: skip


def test_a_running_canary_shows_each_arm_and_no_decision() -> None:
    page = _item(_standing())
    section = page.split('id="canary"', 1)[1].split("</section>", 1)[0]
    assert "25% of runs are assembled with revision 5 (the candidate)" in section
    assert "undecided" in section
    candidate = section.split('id="arm-candidate"', 1)[1].split("</tr>", 1)[0]
    assert "<td>7</td><td>6</td><td>86%</td><td>$0.0125</td><td>3.2</td>" in candidate
    current = section.split('id="arm-current"', 1)[1].split("</tr>", 1)[0]
    assert "<td>13</td><td>13</td><td>100%</td><td>$0.0100</td><td>3.0</td>" in current


def test_a_decided_canary_shows_the_decision_and_its_rule() -> None:
    page = _item(_standing("rollback", "candidate success 0.86 dropped 0.14 > 0.10"))
    assert 'class="status decision-rollback">rollback</span>, because candidate success' in page
    assert "undecided" not in page


def test_an_agent_without_a_canary_has_no_section() -> None:
    assert 'id="canary"' not in _item(None)
    assert canary_view({"revision": 1}, "core.agents.get") is None


def test_a_bad_standing_from_core_is_a_502_naming_the_field() -> None:
    with pytest.raises(QueryError) as raised:
        canary_view({"canary": {"share": 0.5, "current": {"revision": 1}}}, "core.agents.get")
    assert raised.value.status == 502
    assert "candidate" in raised.value.message
