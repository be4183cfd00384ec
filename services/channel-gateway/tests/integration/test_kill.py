"""The gateway as a real process, killed with SIGKILL mid-conversation and started again:
every accepted message becomes exactly one run request, and no message is posted twice (a
three-message thread answered by the offline model across a kill between messages is
test_conversation_offline_model.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from nexus_events.contract import subjects
from nexus_events.events import RunStarted
from nexus_events.transport.bus import Bus
from nexus_testing import eventually, free_port, http_status
from tests.fakes.slack_api import FakeSlack, event_callback, post_event
from tests.support.gateway import (
    SIGNING_SECRET,
    channel_events,
    pair,
    run_requests,
)

T1 = "1700002000.000100"


class GatewayProcess:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = int(env["NEXUS_GATEWAY_PORT"])
        self.health = int(env["NEXUS_HEALTH_PORT"])

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nexus_channel_gateway"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    async def ready(self) -> None:
        # The health endpoint answers from the start of the start-up (503 until ready).
        await eventually(
            lambda: http_status(self.health, "/readyz"),
            lambda status: status == 200,
            within=60,
            what=f"gateway ready: {self.log}",
        )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def gateway_process(
    nats_url: str, pg_dsn: str, slack: FakeSlack, tmp_path: Path
) -> Iterator[GatewayProcess]:
    env = {
        **os.environ,
        "NEXUS_NATS_URL": nats_url,
        "NEXUS_DATABASE_URL": pg_dsn,
        "NEXUS_GATEWAY_PORT": str(free_port()),
        "NEXUS_HEALTH_PORT": str(free_port()),
        "NEXUS_SLACK_BOT_TOKEN": slack.token,
        "NEXUS_SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "NEXUS_SLACK_BASE_URL": slack.api_url,
        "NEXUS_FETCH_TIMEOUT": "0.2",
        "NEXUS_ACK_WAIT": "3",
    }
    process = GatewayProcess(env, tmp_path / "gateway.log")
    yield process
    process.stop()


async def _said(url: str, text: str, ts: str, event_id: str, thread: str | None = None) -> None:
    payload = event_callback(f"<@UBOT> {text}", ts=ts, event_id=event_id, thread_ts=thread)
    assert (await post_event(url, payload, SIGNING_SECRET))[0] == 200


async def _posted(slack: FakeSlack, needle: str) -> list[str]:
    return [p.text for p in slack.posts if needle in p.text and p.thread_ts == T1]


async def test_kill_9_mid_conversation_loses_nothing_and_posts_nothing_twice(
    bus: Bus, gateway_process: GatewayProcess, slack: FakeSlack
) -> None:
    await pair(bus, "slack", "U1")
    gateway_process.start()
    await gateway_process.ready()
    url = f"http://127.0.0.1:{gateway_process.port}/slack/events"
    # Wait until the pairing is applied: the first message gets a run, not a challenge.
    first = event_callback("<@UBOT> run a: job 0", ts="1700001000.000000", event_id="E0")
    assert (await post_event(url, first, SIGNING_SECRET))[0] == 200
    await eventually(lambda: slack.posts, within=30, what="first notice")
    assert "requested" in slack.posts[0].text

    # A burst, then SIGKILL right after the last 200 (publishes and sends still in flight).
    for i in range(1, 11):
        payload = event_callback(
            f"<@UBOT> run a: job {i}", ts=f"17000010{i:02d}.000000", event_id=f"E{i}"
        )
        assert (await post_event(url, payload, SIGNING_SECRET))[0] == 200
    gateway_process.kill()

    gateway_process.start()
    await gateway_process.ready()
    # Slack retries what it sent while the gateway was down or slow: still one run each.
    retry = event_callback("<@UBOT> run a: job 5", ts="1700001005.000000", event_id="E5")
    assert (await post_event(url, retry, SIGNING_SECRET, retry_num=1))[0] == 200

    requests = await eventually(
        lambda: _at_least(run_requests(bus), 11), within=60, what="eleven run requests"
    )
    inputs = sorted(d.event.input for d in requests)  # type: ignore[attr-defined]
    assert inputs == sorted(f"job {i}" for i in range(11))
    # The conversation goes on after the restart: progress reaches every thread.
    for d in requests:
        assert d.address.run_id is not None
        await bus.publish(subjects.run_event(d.address.run_id, "started"), RunStarted())
    outcomes = await eventually(
        lambda: _at_least(channel_events(bus, "sent"), 22), within=60, what="22 outcomes"
    )
    keys = Counter(d.event.idempotency_key for d in outcomes)  # type: ignore[attr-defined]
    assert max(keys.values()) == 1, keys
    posted = Counter((p.thread_ts, p.text) for p in slack.posts)
    assert max(posted.values()) == 1, posted
    # Slack keeps each post's idempotency key in its metadata: a send cut by the kill is
    # looked up before it is posted again, so every reply went out exactly once.
    assert {d.event.status for d in outcomes} == {"sent"}  # type: ignore[attr-defined]
    assert len(slack.posts) == len(outcomes) == 22


async def _at_least(coro: object, n: int) -> object:
    found = await coro  # type: ignore[misc]
    return found if len(found) >= n else None
