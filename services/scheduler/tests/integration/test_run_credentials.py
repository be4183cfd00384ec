"""A run's NATS credential, against a real nats-server running deploy/nats/render.py's config
(static service users + the auth callout) and the scheduler's responder: what a run's runner
can do with it, what it cannot, and a real runner completing a run with it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig
from nexus_events.contract import run_access, subjects
from nexus_events.contract.streams import INBOX, RUNS, StreamSettings, ensure_streams
from nexus_events.events.inbox import InboxMessage
from nexus_events.events.runs import CancelRequested, RunCompleted, RunConfig, RunHeartbeat
from nexus_events.events.spend import SpendDecision, SpendVerdict
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.connect import close_quietly
from nexus_runner.app import execute_run
from nexus_runner.checkpoint import checkpoint_bucket
from nexus_runner.config import RunnerSettings
from nexus_runner.control import RunControl
from nexus_scheduler.auth_callout import AuthCalloutResponder
from nexus_scheduler.callout_jwt import Issuer
from nexus_scheduler.run_credentials import RunCredential, RunCredentialMinter, mint, token_key
from nexus_testing import NatsServer, eventually, free_port

from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.support.nats_render import load_renderer

SEED = Issuer.generate()
DENIED = 0.5  # seconds a refused request is given before it counts as unanswered


class ConfiguredNats(NatsServer):
    """A nats-server started with a config file (its users and auth callout)."""

    def __init__(self, store_dir: Path, config: Path) -> None:
        super().__init__(store_dir, monitor_port=free_port())
        self.config = config

    def command(self) -> list[str]:
        return [*super().command(), "-c", str(self.config)]


@pytest.fixture
def secured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConfiguredNats]:
    renderer = load_renderer()
    users = [u for u in [*renderer.SERVICES, *renderer.CLIENTS, "admin"] if u != "runner"]
    for user in users:
        monkeypatch.setenv(renderer.password_variable(user), f"pw-{user}")
    monkeypatch.setenv(renderer.AUTH_CALLOUT_ISSUER_VARIABLE, Issuer(SEED).public_key)
    config = tmp_path / "nats.conf"
    config.write_text(renderer.render())
    server = ConfiguredNats(tmp_path / "nats", config)
    server.start()  # the environment above is the process's: Popen inherits it
    yield server
    server.stop()


def _settings(server: NatsServer, user: str, **extra: Any) -> BusSettings:
    return BusSettings(
        url=server.url, user=user, password=f"pw-{user}", connect_attempts=1, **extra
    )


@pytest.fixture
async def admin(secured: ConfiguredNats) -> AsyncIterator[Bus]:
    bus = await Bus.connect(_settings(secured, "admin"), source="test")
    await ensure_streams(bus.js)
    await checkpoint_bucket(bus.js, StreamSettings())
    yield bus
    await bus.close()


@pytest.fixture
async def responder(secured: ConfiguredNats, admin: Bus) -> AsyncIterator[AuthCalloutResponder]:
    scheduler = await Bus.connect(_settings(secured, "scheduler"), source="scheduler")
    callout = AuthCalloutResponder(scheduler.nc, Issuer(SEED))
    await callout.start()
    yield callout
    await callout.stop()
    await scheduler.close()


def _config(run_id: str, base_url: str = "http://127.0.0.1:9", **extra: Any) -> RunConfig:
    body: dict[str, Any] = {
        "run_id": run_id,
        "agent_id": "implementer",
        "system_prompt": "You are an implementer.",
        "input": "Write a note.",
        "model": {"name": "gpt-4o-mini", "base_url": base_url},
        "tools": ["write_file", "list_files", "finish"],
    }
    return RunConfig.model_validate(body | extra)


def _run_bus_settings(server: NatsServer, env: dict[str, str]) -> BusSettings:
    return BusSettings(
        url=server.url,
        user=env["NEXUS_NATS_USER"],
        password=env["NEXUS_NATS_PASSWORD"],
        inbox_prefix=env["NEXUS_NATS_INBOX_PREFIX"],
        connect_attempts=1,
        publish_timeout=1.0,
        publish_deadline=3.0,
    )


class RunClient:
    """A raw connection with a run's credential that records the server's refusals."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.nc = Client()

    async def connect(self, settings: BusSettings) -> None:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc))

        try:
            await self.nc.connect(
                servers=[settings.url],
                user=settings.user,
                password=settings.password,
                inbox_prefix=settings.inbox_prefix or "_INBOX",
                allow_reconnect=False,
                connect_timeout=2,
                error_cb=on_error,
            )
        except BaseException:
            await close_quietly(self.nc)  # a refused connect leaves its socket open
            raise

    async def refused(self, what: str) -> bool:
        """True once the server reported a permissions violation mentioning `what` (nats-py
        lower-cases the server's -ERR line); the test fails if none comes within 2s."""
        await self.nc.flush()
        wanted = what.lower()
        return bool(
            await eventually(
                lambda: any("permissions violation" in e and wanted in e for e in self.errors),
                within=2,
                what=f"a permissions violation on {what}",
            )
        )


@pytest.fixture
async def run_a(secured: ConfiguredNats, responder: AuthCalloutResponder) -> AsyncIterator[Any]:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    env = RunCredentialMinter(SEED.encode(), min_ttl=600).runner_nats_env(
        _config(run_id), time.time()
    )
    client = RunClient()
    await client.connect(_run_bus_settings(secured, env))
    yield run_id, env, client
    with contextlib.suppress(nats.errors.Error):
        await client.nc.close()


async def test_a_run_credential_publishes_and_reads_its_own_run(
    secured: ConfiguredNats, admin: Bus, run_a: Any
) -> None:
    run_id, env, _ = run_a
    bus = await Bus.connect(_run_bus_settings(secured, env), source="runner")
    try:
        # Its events, log line and transcript are stored (JetStream acks them).
        await bus.publish(subjects.run_event(run_id, "heartbeat"), RunHeartbeat(seq=1))
        ack = await bus.js.publish(subjects.run_log(run_id), b"{}")
        assert ack.stream == "NEXUS_LOGS"
        ack = await bus.js.publish(subjects.run_transcript(run_id), b"{}")
        assert ack.stream == "NEXUS_TRANSCRIPTS"
        # It replays its own events through its named consumer.
        name = run_access.history_replay(run_id, 1).name
        seen = [d.event async for d in bus.replay(RUNS, run_id=run_id, name=name)]
        assert [type(e).event_name for e in seen] == ["heartbeat"]
        # Its control channel: an inbox message and a cancel request others published.
        control = RunControl(bus, run_id, 1)
        await control.start()
        await admin.publish(subjects.inbox(run_id), InboxMessage(text="hello", sender="t"))
        cancel = CancelRequested(reason="user_requested", requested_by="t")
        await admin.publish(subjects.run_event(run_id, "cancel_requested"), cancel)
        await asyncio.wait_for(control.cancelled.wait(), 5)
        await asyncio.wait_for(control.message_arrived.wait(), 5)
        assert [m.text for m in control.messages] == ["hello"]
        await control.stop()
        # Its checkpoints: chunks on its own subject, read back through its named replay.
        chunks = run_access.checkpoint_chunks(run_id, 1, 1)
        await bus.js.publish(chunks, b"bundle")
        name = run_access.checkpoint_replay(run_id, 1).name
        stream = run_access.CHECKPOINTS_STREAM
        got = [m.data async for m in bus.replay_raw(stream, filter_subject=chunks, name=name)]
        assert got == [b"bundle"]
    finally:
        await bus.close()


async def test_a_run_credential_cannot_touch_other_runs(admin: Bus, run_a: Any) -> None:
    run_id, _, client = run_a
    nc: Client = client.nc
    other = f"run-{uuid.uuid4().hex[:8]}"
    await admin.publish(subjects.inbox(other), InboxMessage(text="secret", sender="t"))
    js = nc.jetstream(timeout=DENIED)

    # Publishing: another run's events, `requested` (its own or any), its own inbox.
    for subject in (
        subjects.run_event(other, "heartbeat"),
        subjects.run_event(run_id, "requested"),
        subjects.run_event(other, "requested"),
        subjects.run_event(run_id, "dispatched"),
        subjects.inbox(run_id),  # an approval decision published by the run itself
        run_access.checkpoint_chunks(other, 1, 1),  # another run's checkpoint
        "$O.nexus_checkpoints.M.b3RoZXI",  # an object store meta record
        subjects.agent_schedules(run_id),  # its own agent's schedules: no schedule_* granted
        subjects.agent_schedules(other),  # another run's agent's schedules
    ):
        with pytest.raises(nats.errors.TimeoutError):
            await js.publish(subject, b"{}")
        assert await client.refused(f'Publish to "{subject}"'), subject

    # Subscribing: another run's subjects and inbox, everyone's replies.
    for subject in (
        subjects.run_events_filter(other),
        subjects.inbox(other),
        subjects.inbox(run_id),  # its own too: it reads its inbox through its consumer
        "_INBOX.>",
        ">",
    ):
        await nc.subscribe(subject)
        assert await client.refused(f'Subscription to "{subject}"'), subject

    # A consumer on another run's subjects: unnamed, named as its own, or its own name with
    # the other run's filter in the body.
    mine = run_access.inbox_consumer(run_id, 1)
    for config in (
        ConsumerConfig(filter_subject=subjects.inbox(other)),
        ConsumerConfig(name=mine.name, filter_subject=subjects.inbox(other)),
        ConsumerConfig(durable_name=mine.name, filter_subject=subjects.inbox(other)),
    ):
        with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
            await js.add_consumer(INBOX, config)
    # Another run's checkpoint chunks, through its own checkpoint consumer's name.
    with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
        await js.add_consumer(
            run_access.CHECKPOINTS_STREAM,
            ConsumerConfig(
                name=run_access.checkpoint_replay(run_id, 1).name,
                filter_subject=run_access.checkpoint_chunks(other, 1, 1),
            ),
        )
    body = {"stream_name": INBOX, "config": {"name": mine.name, "filter_subject": "agent.>"}}
    create = f"$JS.API.CONSUMER.CREATE.{INBOX}.{mine.name}.{mine.filter}"
    answer = json.loads((await nc.request(create, json.dumps(body).encode(), timeout=2)).data)
    assert "error" in answer, answer  # the server checks the body's filter against the subject

    # Reading any message of a stream by sequence (STREAM.MSG.GET) is not allowed either.
    with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
        await js.get_msg(INBOX, seq=1)


async def _refused(server: NatsServer, user: str, password: str) -> str:
    nc = Client()
    try:
        await nc.connect(
            servers=[server.url],
            user=user,
            password=password,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=2,
        )
    except (nats.errors.Error, OSError) as exc:
        await close_quietly(nc)  # a refused connect leaves its socket open
        return str(exc) or type(exc).__name__
    await nc.close()
    return ""


async def test_tokens_of_another_run_expired_or_forged_are_refused(
    secured: ConfiguredNats, responder: AuthCalloutResponder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="nexus_scheduler.auth_callout")
    key = token_key(SEED.encode())
    now = int(time.time())
    user, password = mint(key, RunCredential("run-a", 1, frozenset(), now + 600))
    _, old = mint(key, RunCredential("run-a", 1, frozenset(), now - 1))
    _, other_key = mint(
        token_key(b"not the seed"), RunCredential("run-a", 1, frozenset(), now + 600)
    )
    assert await _refused(secured, user, password) == ""  # the genuine one connects
    cases = [
        ("run:run-b", password, "signature does not match"),  # run A's token as run B
        (user, old, "expired"),
        (user, password.replace(".none.", ".delegate."), "signature does not match"),
        (user, other_key, "signature does not match"),
        ("someone", "x", "not a run user"),
    ]
    for who, secret, why in cases:
        caplog.clear()
        assert "authorization violation" in (await _refused(secured, who, secret)).lower()
        assert any(why in r.getMessage() for r in caplog.records), (who, why, caplog.text)
    # A static service user still connects without the callout; a wrong password does not.
    assert await _refused(secured, "core", "pw-core") == ""
    assert "authorization violation" in (await _refused(secured, "core", "nope")).lower()


async def test_the_real_runner_completes_a_run_with_its_credential(
    secured: ConfiguredNats, admin: Bus, responder: AuthCalloutResponder, tmp_path: Path
) -> None:
    script = [
        Reply(tool_calls=(ToolCall("write_file", {"path": "NOTE.md", "content": "hi\n"}),)),
        Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),)),
    ]
    settings = RunnerSettings(
        workspace_root=tmp_path / "runs",
        llm_api_key="test",
        heartbeat_interval=0.2,
        budget_retry_seconds=0.2,
    )
    # A stand-in for the spend service under its own user: it grants every reservation, so
    # the run completes only if its credential may ask for its own run's reservations.
    reserved: list[str] = []

    async def grant(msg: Msg) -> None:
        reserved.append(msg.subject)
        await msg.respond(SpendVerdict(decision=SpendDecision.GRANTED).model_dump_json().encode())

    spend = await Bus.connect(_settings(secured, "spend"), source="spend")
    await spend.nc.subscribe(subjects.SPEND_RESERVE, cb=grant)
    await spend.nc.flush()
    async with FakeOpenAI(script) as llm:
        config = _config(f"run-{uuid.uuid4().hex[:8]}", llm.base_url)
        env = RunCredentialMinter(SEED.encode(), min_ttl=600).runner_nats_env(config, time.time())
        bus = await Bus.connect(_run_bus_settings(secured, env), source="runner")
        try:
            terminal = await asyncio.wait_for(execute_run(config, settings, bus), 60)
        finally:
            await bus.close()
            await spend.close()
    assert isinstance(terminal, RunCompleted), terminal
    assert reserved == [subjects.spend_reserve(config.run_id)] * 2  # one a model call
    stored = [type(d.event).event_name async for d in admin.replay(RUNS, run_id=config.run_id)]
    assert stored[0] == "started"
    assert stored[-1] == "completed"
    assert "checkpointed" in stored


async def test_a_lab_run_reads_its_source_s_transcript_and_nothing_else_of_it(
    secured: ConfiguredNats, admin: Bus, responder: AuthCalloutResponder
) -> None:
    source, third = f"run-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"
    for run in (source, third):
        await admin.js.publish(subjects.run_transcript(run), f"entry of {run}".encode())
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    config = _config(run_id, lab={"mode": "replay", "source_run_id": source})
    env = RunCredentialMinter(SEED.encode(), min_ttl=600).runner_nats_env(config, time.time())
    bus = await Bus.connect(_run_bus_settings(secured, env), source="runner")
    client = RunClient()
    await client.connect(_run_bus_settings(secured, env))
    try:
        # Its source's transcript, through the consumer run_access names for it.
        mine = run_access.source_transcript_replay(run_id, 1, source)
        got = [
            m.data
            async for m in bus.replay_raw(mine.stream, filter_subject=mine.filter, name=mine.name)
        ]
        assert got == [f"entry of {source}".encode()]
        # A third run's transcript, through the same consumer name or its own transcript's.
        js = client.nc.jetstream(timeout=DENIED)
        for name in (mine.name, run_access.transcript_replay(run_id, 1).name):
            with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
                await js.add_consumer(
                    mine.stream,
                    ConsumerConfig(name=name, filter_subject=subjects.run_transcript(third)),
                )
        # Nothing of the source is writable: its events, transcript, checkpoints.
        for subject in (
            subjects.run_event(source, "heartbeat"),
            subjects.run_event(source, "completed"),
            subjects.run_transcript(source),
            run_access.checkpoint_chunks(source, 1, 1),
        ):
            with pytest.raises(nats.errors.TimeoutError):
                await js.publish(subject, b"{}")
            assert await client.refused(f'Publish to "{subject}"'), subject
    finally:
        await bus.close()
        with contextlib.suppress(nats.errors.Error):
            await client.nc.close()
