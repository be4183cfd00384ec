"""A warm pod's slot credential (docs/warm-starts.md, Kubernetes) against a real nats-server
with deploy/nats's config and the scheduler's auth callout: the pod receives its own slot's
hand-off and answers it once; it cannot read another slot's, nor publish anything else."""

from __future__ import annotations

import time

import nats.errors
import pytest
from nexus_events.contract import subjects
from nexus_events.events.warm import WarmClaim, WarmClaimStatus
from nexus_events.transport.bus import Bus, BusSettings
from nexus_scheduler.auth_callout import AuthCalloutResponder
from nexus_scheduler.callout_jwt import Issuer
from nexus_scheduler.run_credentials import RunCredentialMinter

from .test_run_credentials import (  # noqa: F401 - fixtures
    SEED,
    ConfiguredNats,
    RunClient,
    _settings,
    admin,
    responder,
    secured,
)


def _slot_settings(server: ConfiguredNats, env: dict[str, str]) -> BusSettings:
    return BusSettings(
        url=server.url,
        user=env["NEXUS_NATS_USER"],
        password=env["NEXUS_NATS_PASSWORD"],
        connect_attempts=1,
    )


async def test_a_slot_credential_answers_its_own_hand_off_and_reads_no_other(
    secured: ConfiguredNats,  # noqa: F811
    responder: AuthCalloutResponder,  # noqa: F811
) -> None:
    minter = RunCredentialMinter(Issuer(SEED).seed, min_ttl=60)
    pod = RunClient()
    await pod.connect(_slot_settings(secured, minter.slot_nats_env("s1", time.time(), 600)))
    claim = WarmClaim(status=WarmClaimStatus.ACCEPTED, run_id="r1", attempt=1)

    async def answer(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(claim.model_dump_json().encode())

    await pod.nc.subscribe(subjects.runner_warm("s1"), cb=answer)
    await pod.nc.flush()
    scheduler = await Bus.connect(_settings(secured, "scheduler"), source="scheduler")
    try:
        reply = await scheduler.nc.request(subjects.runner_warm("s1"), b"{}", timeout=2)
        assert WarmClaim.model_validate_json(reply.data) == claim
        # Another slot's hand-offs (which carry that run's credential) are not its to read.
        await pod.nc.subscribe(subjects.runner_warm("s2"))
        assert await pod.refused(subjects.runner_warm("s2"))
        # It publishes nothing but its answers.
        await pod.nc.publish(subjects.run_event("r1", "completed"), b"{}")
        assert await pod.refused(subjects.run_event("r1", "completed"))
    finally:
        await scheduler.close()
        await pod.nc.close()


async def test_a_forged_or_expired_slot_credential_is_refused(
    secured: ConfiguredNats,  # noqa: F811
    responder: AuthCalloutResponder,  # noqa: F811
) -> None:
    minter = RunCredentialMinter(Issuer(SEED).seed, min_ttl=60)
    expired = minter.slot_nats_env("s1", time.time() - 1000, 10)
    forged = minter.slot_nats_env("s1", time.time(), 600) | {"NEXUS_NATS_USER": "warm:s2"}
    for env in (expired, forged):
        with pytest.raises((nats.errors.Error, OSError)):
            await RunClient().connect(_slot_settings(secured, env))
