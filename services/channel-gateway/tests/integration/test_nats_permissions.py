"""The gateway as the `channel-gateway` NATS user of deploy/nats/nats.conf: a whole chat
conversation (run request, progress, approval claim in KV, decision) and a pairings request
without one permission violation, so the rendered permissions are enough and nothing more is
asked."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, ensure_streams
from nexus_events.events import ApprovalRequested, RunCompleted, RunStarted
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import eventually, free_port, nats_server_binary
from tests.fakes.slack_api import FakeSlack, event_callback, post_event
from tests.support.gateway import SIGNING_SECRET, gateway_settings, inbox_of, pair, run_requests
from tests.support.nats_render import load_renderer

from nexus_channel_gateway.app import GatewayApp

ROOT = Path(__file__).resolve().parents[4]
PASSWORDS = {
    "NEXUS_ADMIN_NATS_PASSWORD": "admin-pw",
    "NEXUS_CHANNEL_GATEWAY_NATS_PASSWORD": "gw-pw",
}


@pytest.fixture
def secured_nats(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    log = tmp_path / "nats.log"
    env = {**os.environ, **PASSWORDS}
    # Every other user of the rendered file needs its password variable to load it.
    render = load_renderer()
    for name in [*render.SERVICES, *render.CLIENTS]:
        env.setdefault(render.password_variable(name), "x")
    # The auth callout's issuer (compose's default, a valid account key): any will do here.
    env.setdefault(
        render.AUTH_CALLOUT_ISSUER_VARIABLE,
        "ACWL6UMQIXAUTPM4K32M3HUHK3YFLDSXJ6XFEWOVRIQ6GTR7FZZHHR4D",
    )
    proc = subprocess.Popen(
        [nats_server_binary(), "-c", str(ROOT / "deploy/nats/nats.conf"), "-a", "127.0.0.1",
         "-p", str(port), "-m", str(free_port()), "-sd", str(tmp_path / "js"), "-l", str(log)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield f"nats://127.0.0.1:{port}", log
    finally:
        proc.kill()
        proc.wait(10)


async def test_a_conversation_needs_no_permission_the_config_lacks(
    secured_nats: tuple[str, Path], pg_dsn: str, slack: FakeSlack, telegram: object
) -> None:
    url, log = secured_nats
    admin = await Bus.connect(
        BusSettings(url=url, user="admin", password="admin-pw", connect_attempts=20),
        source="operator",
    )
    gateway_bus = await Bus.connect(
        BusSettings(url=url, user="channel-gateway", password="gw-pw", connect_attempts=20),
        source="channel-gateway",
    )
    try:
        await ensure_streams(admin.js)
        app = GatewayApp(
            gateway_settings(pg_dsn, slack.api_url, "http://127.0.0.1:9/bot",
                             telegram_bot_token=None),
            bus=gateway_bus,
        )  # fmt: skip
        await app.start()
        assert app.ready()  # its JetStream probe asks only what the user may ask
        try:
            await pair(admin, "slack", "U1")
            await eventually(lambda: app.store.allowed("slack", "U1"), what="paired")  # type: ignore[union-attr]
            endpoint = f"http://127.0.0.1:{app.port}/slack/events"
            ts = "1700002000.000100"
            await post_event(endpoint, event_callback("<@UBOT> run a: b", ts=ts), SIGNING_SECRET)
            run_id = (await eventually(lambda: run_requests(admin), what="run"))[0].address.run_id
            assert run_id is not None
            await admin.publish(subjects.run_event(run_id, "started"), RunStarted())
            await admin.publish(
                subjects.run_event(run_id, "approval_requested"),
                ApprovalRequested(
                    approval_id="apr-9", tool="shell", summary="x",
                    expires_at=datetime.now(UTC) + timedelta(minutes=5),
                ),
            )  # fmt: skip
            asked = await eventually(
                lambda: [t for t in slack.thread("C1", ts) if "yes " in t], what="asked"
            )
            short = asked[0].split("yes ")[1].split("`")[0]
            # A paired non-approver answering from a DM is refused and audited (approval_refused
            # on NEXUS_RUNS, after a replay of the run): both within the gateway's permissions.
            await pair(admin, "slack", "U2")
            await eventually(lambda: app.store.allowed("slack", "U2"), what="U2 paired")  # type: ignore[union-attr]
            dm = event_callback(
                f"yes {short}", user="U2", channel="D2", kind="message",
                ts="1700002000.500100", event_id="E-dm",
            )  # fmt: skip
            await post_event(endpoint, dm, SIGNING_SECRET)
            await eventually(
                lambda: [t for t in slack.thread("D2", "1700002000.500100") if "may not" in t],
                what="the refusal",
            )
            refused = subjects.run_events_filter(run_id, "approval_refused")
            assert [d async for d in admin.replay(RUNS, filter_subject=refused)]
            await post_event(
                endpoint,
                event_callback(f"yes {short}", ts="1700002001.000100", thread_ts=ts, event_id="E2"),
                SIGNING_SECRET,
            )
            await eventually(lambda: inbox_of(admin, run_id), what="decision")
            await admin.publish(subjects.run_event(run_id, "completed"), RunCompleted())
            await eventually(
                lambda: any("completed" in t for t in slack.thread("C1", ts)), what="completed"
            )
            # `nexus pair ls` (the admin user) asks the gateway's endpoint; it may answer.
            reply = await admin.nc.request(subjects.CHANNEL_PAIRINGS, b"{}", timeout=10)
            pairings = json.loads(reply.data)["pairings"]
            assert [(p["channel"], p["user"], p["status"]) for p in pairings] == [
                ("slack", "U1", "approved"),
                ("slack", "U2", "approved"),
            ]
        finally:
            await app.stop()
    finally:
        await gateway_bus.close()
        await admin.close()
    violations = [line for line in log.read_text().splitlines() if "Violation" in line]
    assert not violations, "\n".join(violations[:20])
