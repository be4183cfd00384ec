"""An agent's catalog page with a canary: core's canary_decided events appear in the agent's
history beside its revisions (with the numbers behind each decision), and make no revision of
their own; read from a real core and the real NEXUS_CATALOG."""

from __future__ import annotations

from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events import CanaryDecided
from nexus_events.events.lab import ArmStats
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_testing.polling import eventually

from nexus_console.canary_standing import DECIDED_TOKEN

from .conftest import READ_TOKEN, Clients

AGENT_YAML = """
id: implementer
role: implementer
model: {name: test-model}
system_prompt: You implement tasks.
"""
CANDIDATE_YAML = AGENT_YAML.replace("You implement", "You implement carefully")
WITH_CANARY = AGENT_YAML + "canary: {revision: 2, share: 0.5}\n"


async def test_a_canary_decision_is_in_the_agents_history_and_no_revision(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await apply_agent(bus, AGENT_YAML, applied_by="ops")
    await apply_agent(bus, CANDIDATE_YAML, applied_by="ops")
    await apply_agent(bus, WITH_CANARY, applied_by="ops")
    decided = CanaryDecided(
        decision="promote", candidate_revision=2, current_revision=3,
        rule="candidate success rate 0.90 >= current 0.80 - 0.00 after 10 runs each",
        candidate=ArmStats(revision=2, runs=10, succeeded=9, success_rate=0.9, mean_cost_usd=0.02),
        current=ArmStats(revision=3, runs=10, succeeded=8, success_rate=0.8, mean_cost_usd=0.03),
    )  # fmt: skip
    await bus.publish(
        subjects.catalog_event(CatalogKind.AGENT, "implementer", DECIDED_TOKEN), decided
    )
    client = await clients()
    await client.login(READ_TOKEN)

    async def page() -> str:
        return (await client.get("/catalog/agents/implementer"))[1]

    text = await eventually(
        page, lambda p: "Current revision 3" in p and "canary-decided" in p, what="the decision"
    )
    row = text.split('class="canary-decided"', 1)[1].split("</tr>", 1)[0]
    assert 'data-decision="promote"' in row
    assert "candidate 2 over 3, because candidate success rate 0.90" in row
    assert "candidate: 9/10 succeeded, $0.0200 per run" in row
    assert "current: 8/10 succeeded, $0.0300 per run" in row
    # The newest first: the decision (after revision 3) heads the history.
    history = text.split('<table class="revisions">', 1)[1]
    assert history.index("canary-decided") < history.index('id="revision-3"')
    # Three revisions, not four: the decision is no delete of the agent.
    assert 'id="revision-4"' not in text
    assert "deleted" not in history
