"""The warm pod's claim (nexus_runner.warm_claim) over real NATS: two schedulers hand one pod
two runs at once and exactly one is accepted; a re-sent hand-off of the claimed run is
accepted again; a malformed one gets no answer and claims nothing."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest
from nats.aio.client import Client
from nexus_events.contract import subjects
from nexus_events.events.runs import RunConfig
from nexus_events.events.warm import WarmClaim, WarmClaimStatus, WarmHandoff
from nexus_events.transport.connect import BusSettings, connect

from nexus_runner.warm_claim import SlotClaim, listen


def _handoff(run_id: str, attempt: int = 1) -> WarmHandoff:
    config = RunConfig.model_validate(
        {
            "run_id": run_id,
            "attempt": attempt,
            "agent_id": "implementer",
            "system_prompt": "s",
            "input": "i",
            "model": {"name": "m", "base_url": "http://127.0.0.1:9"},
        }
    )
    return WarmHandoff(config=config, env={"NEXUS_RUN_ID": run_id})


async def _hand(nc: Client, slot: str, handoff: WarmHandoff) -> WarmClaim:
    reply = await nc.request(
        subjects.runner_warm(slot), handoff.model_dump_json().encode(), timeout=2
    )
    return WarmClaim.model_validate_json(reply.data)


async def test_two_hand_offs_at_once_one_pod_accepts_exactly_one(nats_url: str) -> None:
    pod, first, second = [await connect(BusSettings(url=nats_url)) for _ in range(3)]
    claim = SlotClaim()
    try:
        await listen(pod, "slot-a", claim)
        answers = await asyncio.gather(
            _hand(first, "slot-a", _handoff("run-1")), _hand(second, "slot-a", _handoff("run-2"))
        )
        statuses = sorted(a.status for a in answers)
        assert statuses == [WarmClaimStatus.ACCEPTED, WarmClaimStatus.TAKEN]
        assert claim.handoff is not None
        served = claim.handoff.config.run_id
        # Both answers name the one run the pod serves.
        assert {a.run_id for a in answers} == {served}
        # The scheduler that won, restarted, sends it again: still accepted, still that run.
        again = await _hand(first, "slot-a", _handoff(served))
        assert (again.status, again.run_id) == (WarmClaimStatus.ACCEPTED, served)
        # A later attempt of the same run is another run for the pod: taken.
        later = await _hand(first, "slot-a", _handoff(served, attempt=2))
        assert later.status is WarmClaimStatus.TAKEN
    finally:
        for nc in (pod, first, second):
            await nc.close()


async def test_a_malformed_hand_off_gets_no_answer_and_claims_nothing(
    nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    pod = await connect(BusSettings(url=nats_url))
    scheduler = await connect(BusSettings(url=nats_url))
    claim = SlotClaim()
    try:
        await listen(pod, "slot-b", claim)
        await _unanswered(scheduler, subjects.runner_warm("slot-b"), b'{"config": 1}')
        # The pod got it (not merely nobody listening) and dropped it with the reason.
        assert any("malformed hand-off" in r.getMessage() for r in caplog.records)
        assert claim.handoff is None
        assert not claim.claimed.is_set()
        answer = await _hand(scheduler, "slot-b", _handoff("run-3"))
        assert answer.status is WarmClaimStatus.ACCEPTED
    finally:
        await pod.close()
        await scheduler.close()


async def _unanswered(nc: Client, subject: str, payload: bytes) -> None:
    """Send until the server finds the listener, then require the request to time out. A
    loaded CI run once got "no responders" right after the listener's flushed subscribe."""
    for _ in range(20):
        try:
            await nc.request(subject, payload, timeout=0.5)
        except nats.errors.NoRespondersError:
            await asyncio.sleep(0.1)
            continue
        except nats.errors.TimeoutError:
            return
        pytest.fail(f"{subject} answered a malformed hand-off")
    pytest.fail(f"nobody listened on {subject}")
