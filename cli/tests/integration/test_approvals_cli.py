"""`nexus approve|deny` under the approver policy and `nexus approvals ls`, against a real core
on a real nats-server and PostgreSQL: a deny that lost to Slack says who decided and where;
an operator the policy leaves out is refused (exit 6), audited, and decides nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.streams import INBOX, RUNS
from nexus_events.events import (
    ApprovalDecided,
    ApprovalDecision,
    ApprovalRefused,
    ApprovalRequested,
    Origin,
    RunRequested,
    RunStarted,
)
from nexus_events.transport.approvals import claim_approval, held_claim
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_testing import eventually
from tests.support.cli import nexus

from nexus_cli.client import whoami

AGENT = "id: {id}\nrole: devops\nmodel: {{name: test-model}}\nsystem_prompt: You {id}.\n"
GUARDED = AGENT + "permissions: {{approvers: ['chat:slack:CAPP', 'nats:ops']}}\n"


async def _asks(bus: Bus, run_id: str) -> None:
    """The run's runner asks for approval ap1 (core projects the run awaiting_approval)."""
    await bus.publish(subjects.run_event(run_id, "started"), RunStarted())
    await bus.publish(
        subjects.run_event(run_id, "approval_requested"),
        ApprovalRequested(
            approval_id="ap1",
            tool="shell",
            summary="rm -rf build/",
            expires_at=datetime.now(UTC) + timedelta(minutes=10),
        ),
    )
    await eventually(lambda: _status_is(bus, run_id), what=f"{run_id} awaiting approval")


async def _status_is(bus: Bus, run_id: str) -> bool:
    reply = await bus.nc.request(
        subjects.CORE_RUNS_GET, json.dumps({"run_id": run_id}).encode(), timeout=5
    )
    return bool(json.loads(reply.data).get("status") == "awaiting_approval")


async def _inbox(bus: Bus, run_id: str) -> list[object]:
    return [d.event async for d in bus.replay(INBOX, filter_subject=subjects.inbox(run_id))]


async def test_a_cli_deny_that_lost_to_slack_says_who_decided(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await apply_agent(bus, AGENT.format(id="ops"))
    await eventually(core.catalog_fresh, what="catalog applied")
    # Started from the CLI by this user: the default policy lets its requester decide here.
    request = RunRequested(agent_id="ops", origin=Origin.CLI, requested_by=whoami())
    await bus.publish(subjects.run_event("run_cli_1", "requested"), request)
    await _asks(bus, "run_cli_1")
    listed = await nexus(nats_url, tmp_path, "approvals", "ls", "-o", "json")
    assert listed.exit_code == 0, listed.output
    [pending] = json.loads(listed.stdout)["approvals"]
    assert (pending["run_id"], pending["approval_id"], pending["tool"]) == (
        "run_cli_1",
        "ap1",
        "shell",
    )
    assert (pending["may_decide"], pending["requester"]) == (
        ["approver-chats", "requester"],
        whoami(),
    )

    # Slack decides first (the gateway claims, then publishes its decision).
    slack = await claim_approval(
        bus.js, "run_cli_1", "ap1", "approve", decided_by="slack:U1", surface="slack"
    )
    assert slack.won
    # The runner took Slack's decision and recorded it (the run goes on).
    await bus.publish(
        subjects.run_event("run_cli_1", "approval_decided"),
        ApprovalDecided(
            approval_id="ap1", decision="approved", decided_by="slack:U1", surface="slack"
        ),
    )
    denied = await nexus(nats_url, tmp_path, "deny", "run_cli_1", "ap1")
    assert denied.exit_code == 2, denied.output
    assert "already decided: approve by slack:U1 via slack" in denied.stderr
    assert await _inbox(bus, "run_cli_1") == []  # the CLI published nothing


async def test_an_operator_the_agents_policy_leaves_out_is_refused(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await apply_agent(bus, GUARDED.format(id="prod"))
    await eventually(core.catalog_fresh, what="catalog applied")
    request = RunRequested(agent_id="prod", origin=Origin.CLI, requested_by=whoami())
    await bus.publish(subjects.run_event("run_prod_1", "requested"), request)
    # core assembles it: `prepared` carries the agent's approvers to every surface.
    await eventually(
        lambda: _has(bus, "run_prod_1", "prepared"), what="prepared with the agent's policy"
    )
    await _asks(bus, "run_prod_1")

    refused = await nexus(nats_url, tmp_path, "approve", "run_prod_1", "ap1")
    assert refused.exit_code == 6, refused.output
    assert f"you may not decide approval ap1: nats:{whoami()} is not an approver" in refused.stderr
    assert "the agent's policy allows: chat:slack:CAPP, nats:ops" in refused.stderr
    audit = [
        d.event
        async for d in bus.replay(
            RUNS, filter_subject=subjects.run_event("run_prod_1", "approval_refused")
        )
    ]
    assert len(audit) == 1
    assert isinstance(audit[0], ApprovalRefused)
    assert (audit[0].answered_by, audit[0].surface, audit[0].decision) == (
        f"nats:{whoami()}",
        "cli",
        "approve",
    )
    assert await held_claim(bus.js, "run_prod_1", "ap1") is None
    assert await _inbox(bus, "run_prod_1") == []

    # The NATS user the policy names decides (the user in the URL is the CLI's identity).
    as_ops = nats_url.replace("nats://", "nats://ops@")
    listed = await nexus(as_ops, tmp_path, "approvals", "ls", "--run", "run_prod_1", "-o", "json")
    assert json.loads(listed.stdout)["approvals"][0]["may_decide"] == [
        "chat:slack:CAPP",
        "nats:ops",
    ]
    approved = await nexus(as_ops, tmp_path, "approve", "run_prod_1", "ap1")
    assert approved.exit_code == 0, approved.output
    [decision] = await _inbox(bus, "run_prod_1")
    assert isinstance(decision, ApprovalDecision)
    assert (decision.decision, decision.decided_by, decision.surface) == ("approve", "ops", "cli")


async def _has(bus: Bus, run_id: str, event: str) -> bool:
    found = bus.replay(RUNS, filter_subject=subjects.run_event(run_id, event))
    return any([d async for d in found])
