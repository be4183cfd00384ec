"""Wiring and lifecycle: bus, runtime, leadership, replay, consumer, ticker; drain on stop.

Replicas campaign for a KV lease; only the holder consumes and acts. On taking the lease a
replica rebuilds admission from the newest snapshot and the NEXUS_RUNS events after it (so it
neither loses queued runs nor exceeds the limits; heartbeats only of open runs, see
`nexus_scheduler.rebuild`), re-adopts the runs its runtime still has (runs it does not know
are marked `lost` only after the heartbeat window), then follows the stream, and writes a
snapshot now and then (`nexus_scheduler.checkpoint`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import nats.errors
import nats.js.errors
from nexus_events.bus import BusSettings, Consumer, ConsumerSpec
from nexus_events.events import RunConfig
from nexus_events.health import HealthServer, JetStreamProbe
from nexus_events.lease import Lease
from nexus_events.metrics import MetricsSettings, setup_metrics
from nexus_events.process import ServiceApp
from nexus_events.streams import RUNS, SCHEDULES, StreamSettings, ensure_streams

from nexus_scheduler.auth_callout import AuthCalloutResponder
from nexus_scheduler.callout_jwt import Issuer
from nexus_scheduler.checkpoint import Checkpointer
from nexus_scheduler.clock import Clock, SystemClock
from nexus_scheduler.config import SchedulerSettings
from nexus_scheduler.handlers import create_run_handler, create_schedule_handler
from nexus_scheduler.metrics import SchedulerMetrics
from nexus_scheduler.rebuild import rebuild
from nexus_scheduler.run_credentials import RunCredentialMinter
from nexus_scheduler.runtime.base import AgentRuntime
from nexus_scheduler.schedules_service import ScheduleService
from nexus_scheduler.service import SchedulerService, watched_subjects
from nexus_scheduler.snapshot import Snapshot
from nexus_scheduler.snapshot_store import SnapshotStore

log = logging.getLogger(__name__)

SOURCE = "scheduler"


def run_credentials(settings: SchedulerSettings) -> Callable[[RunConfig], dict[str, str]] | None:
    """What gives each runner its run's own NATS credential; None without a callout seed."""
    if settings.auth_callout_seed is None:
        return None
    seed = settings.auth_callout_seed.get_secret_value().encode()
    minter = RunCredentialMinter(seed, min_ttl=settings.run_credential_min_ttl_seconds)
    return lambda config: minter.runner_nats_env(config, time.time())


def build_runtime(settings: SchedulerSettings) -> AgentRuntime:
    credentials = run_credentials(settings)
    if settings.runtime == "kubernetes":
        from nexus_scheduler.runtime.kubernetes import KubernetesRuntime, KubernetesSettings

        return KubernetesRuntime(
            KubernetesSettings.from_scheduler(settings), credentials=credentials
        )
    from nexus_scheduler.runtime.confinement import Confinement, resolve
    from nexus_scheduler.runtime.local import LocalProcessRuntime

    decision = resolve(settings.confinement)
    return LocalProcessRuntime(
        Path(settings.local_workdir),
        command=settings.local_command,
        kill_grace=settings.local_kill_grace_seconds,
        pass_env=settings.local_pass_env,
        finished_kept=settings.local_finished_kept,
        finished_ttl=settings.local_finished_ttl_seconds,
        confinement=Confinement(decision.bwrap) if decision.bwrap else None,
        credentials=credentials,
    )


class SchedulerApp(ServiceApp):
    """The scheduler service: campaigns for the lease and, leading, admits and dispatches."""

    def __init__(
        self,
        settings: SchedulerSettings,
        *,
        bus_settings: BusSettings | None = None,
        runtime: AgentRuntime | None = None,
        clock: Clock | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        super().__init__("scheduler")
        # None: built in `open` from NEXUS_METRICS_* / OTEL_* (OTLP and/or Prometheus).
        self.metrics = metrics
        self.settings = settings
        self.bus_settings = bus_settings or BusSettings()
        self.runtime = runtime or build_runtime(settings)
        self.clock = clock or SystemClock()
        self.leading = asyncio.Event()
        self.service: SchedulerService | None = None
        self.schedules: ScheduleService | None = None
        self._schedule_consumer: Consumer | None = None
        self._lease: Lease | None = None
        self._replicas = 1
        self._consumer: Consumer | None = None
        self._stopping = asyncio.Event()
        self._campaign: asyncio.Task[None] | None = None
        self._renewal: asyncio.Task[None] | None = None
        # Wakes the campaign at once: stopping, or the lease found lost (so a replica that
        # lost it stops consuming before it can bounce the leader's messages again).
        self._wake = asyncio.Event()
        self._ticker: asyncio.Task[None] | None = None
        self._checkpoints: asyncio.Task[None] | None = None
        self.checkpointer: Checkpointer | None = None
        self.health: HealthServer | None = None
        # Whether JetStream has leaders for the streams the scheduler needs (readiness).
        self.jetstream: JetStreamProbe | None = None

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        # First up, last down: liveness holds through start-up and the whole drain.
        if self.settings.health_port is not None:
            self.health = HealthServer(
                self.ready, self.settings.health_host, self.settings.health_port
            )
            await self.health.start()
            stack.push_async_callback(self.health.stop)
        bus = await self.connect_bus(stack, self.bus_settings, SOURCE)
        if self.settings.auth_callout_seed is not None:
            # Every replica answers (a queue group): runners connect whoever leads.
            issuer = Issuer(self.settings.auth_callout_seed.get_secret_value())
            responder = AuthCalloutResponder(bus.nc, issuer)
            await responder.start()
            stack.push_async_callback(responder.stop)
        await ensure_streams(bus.js, update=False)  # core owns stream settings
        self.jetstream = JetStreamProbe(
            bus.js, [RUNS, SCHEDULES], interval=self.settings.jetstream_probe_seconds
        )
        await self.jetstream.start()
        stack.push_async_callback(self.jetstream.stop)
        if self.metrics is None:
            provider = setup_metrics("scheduler", MetricsSettings())
            stack.callback(provider.shutdown)
            self.metrics = SchedulerMetrics(provider)
        await self.runtime.start()
        stack.push_async_callback(self._close_runtime)
        # The lease and snapshot buckets are replicated like the streams (NEXUS_STREAMS_REPLICAS).
        self._replicas = StreamSettings().replicas
        self._lease = lease = Lease(
            bus.js,
            self.settings.lease_bucket,
            self.settings.replica_id,
            self.settings.lease_ttl_seconds,
            replicas=self._replicas,
        )
        stack.push_async_callback(lease.release)
        self._campaign = asyncio.create_task(self._campaign_loop(), name="scheduler:lease")
        stack.push_async_callback(self._drain_bounded)

    async def _close_runtime(self) -> None:
        await self.runtime.close()  # the runtime as it is at stop (tests swap its close)

    def ready(self) -> bool:
        """Connected to NATS, JetStream electing no leader for NEXUS_RUNS or NEXUS_SCHEDULES
        (nothing could be dispatched or recorded meanwhile), and campaigning for the lease
        (leading or standing by), not stopping: a standby replica is ready to take over."""
        campaign = self._campaign
        return (
            self._running
            and not self._stopping.is_set()
            and self.nats_connected
            and self.jetstream is not None
            and self.jetstream.ok
            and campaign is not None
            and not campaign.done()
        )

    async def stop(self) -> None:
        """Drain: stop consuming after the batch in hand, finish starts, hand the lease over
        (then, unwinding the start: the runtime, NATS, and the health endpoint last).

        The drain is bounded by `drain_timeout_seconds`: past it (a runtime start that
        hangs, a rebuild in progress) what is left is cancelled, a warning says so, and the
        stop goes on. A start cut short left no `dispatched` event, so the next leader
        starts that run again (the runtimes adopt a start that did get through).
        """
        self._stopping.set()
        self._wake.set()
        await super().stop()

    async def _drain_bounded(self) -> None:
        timeout = self.settings.drain_timeout_seconds
        try:
            async with asyncio.timeout(timeout):
                await self._drain()
        except TimeoutError:
            in_flight = len(self.service.in_flight()) if self.service is not None else 0
            log.warning(
                "drain did not finish within %gs; stopping anyway",
                timeout,
                extra={"drain_timeout": timeout, "starts_abandoned": in_flight},
            )
            try:
                async with asyncio.timeout(timeout):
                    await self._abandon()
            except TimeoutError:
                log.error(  # noqa: TRY400 - a timeout, not an error to trace
                    "abandoning the drain took over %gs too; closing anyway", timeout
                )

    async def _drain(self) -> None:
        if self._campaign is not None:
            await self._campaign
            self._campaign = None
        await self._step_down()

    async def _abandon(self) -> None:
        """After a drain timeout: cancel what still runs, then step down without waiting."""
        if self._campaign is not None:
            self._campaign.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._campaign
            self._campaign = None
        if self.service is not None:
            await self.service.abandon()
        await self._step_down()

    async def _campaign_loop(self) -> None:
        assert self._lease is not None
        period = self.settings.lease_ttl_seconds / 3
        while not self._stopping.is_set():
            try:
                if not self._lease.held:
                    if self.service is not None:
                        await self._step_down()  # the renewal (or a fence) lost the lease
                    if await self._lease.acquire():
                        # Renewed in its own task from now on, so a long rebuild below
                        # cannot let the lease expire under a replica still acting on it.
                        self._renewal = asyncio.create_task(
                            self._renew_loop(period), name="scheduler:renew"
                        )
                        await self._lead()
            except Exception:  # keep campaigning through NATS hiccups
                log.exception("lease campaign step failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=period)
            self._wake.clear()

    async def _renew_loop(self, period: float) -> None:
        assert self._lease is not None
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=period)
            if self._stopping.is_set():
                return
            try:
                renewed = await self._lease.renew()
            except (nats.errors.Error, nats.js.errors.Error) as exc:
                # Not renewed this time; the lease may still be ours (the fence asks the
                # server before every side effect), so keep trying.
                log.warning("lease renewal failed: %s", exc)
                continue
            except Exception:  # the renewal must outlive anything but a lost lease
                log.exception("lease renewal failed")
                continue
            if not renewed:
                log.error("lost the scheduler lease; standing by")
                self.leading.clear()
                self._wake.set()
                return

    async def _fence(self) -> bool:
        held = self._lease is not None and await self._lease.still_held()
        if not held:
            self.leading.clear()
            self._wake.set()
        return held

    async def _lead(self) -> None:
        service = SchedulerService(
            self.bus,
            self.runtime,
            limits=self.settings.limits(),
            timeouts=self.settings.timeouts(),
            exit_grace=self.settings.exit_grace_seconds,
            clock=self.clock,
            fence=self._fence,
            metrics=self.metrics,
        )
        self.service = service
        store = SnapshotStore(
            self.bus,
            self.settings.snapshot_bucket,
            self.settings.replica_id,
            replicas=self._replicas,
        )
        snapshot = await self._load_snapshot(store) if self.settings.snapshots else None
        rebuilt = await rebuild(self.bus, service, snapshot)
        adopted = await service.recover()
        log.info(
            "leading: state rebuilt",
            extra={
                "snapshot_seq": rebuilt.snapshot_seq,
                "replayed": rebuilt.replayed,
                "heartbeats": rebuilt.heartbeats,
                "adopted": len(adopted),
                "waiting": len(service.state.waiting),
            },
        )
        # A new durable starts right after the replay instead of re-reading the stream; an
        # existing one (a previous leader's) keeps its position, and re-delivered events fold
        # idempotently. Undecodable replayed messages are only dead-lettered by a durable
        # that reads them, i.e. an existing one.
        spec = ConsumerSpec(
            stream=RUNS,
            durable=self.settings.consumer_name,
            filter_subjects=watched_subjects(),
            batch=200,
            start_seq=rebuilt.last_seq + 1 if rebuilt.last_seq else None,
        )
        self._consumer = self.bus.consumer(spec, create_run_handler(service))
        await self._consumer.start()
        self.schedules = ScheduleService(
            self.bus,
            jitter_cap=self.settings.schedule_jitter_cap_seconds,
            misfire_grace=self.settings.schedule_misfire_grace_seconds,
            policy=self.settings.schedule_missed_policy,
            overlap=self.settings.schedule_overlap_policy,
            clock=self.clock,
            fence=self._fence,  # a fire is a side effect too
        )
        await self.schedules.load()
        self._schedule_consumer = self.bus.consumer(
            ConsumerSpec(
                stream=SCHEDULES,
                durable=f"{self.settings.consumer_name}-schedules",
                start_seq=self.schedules.last_seq + 1 if self.schedules.last_seq else None,
            ),
            create_schedule_handler(self.schedules),
        )
        await self._schedule_consumer.start()
        self._ticker = asyncio.create_task(self._tick_loop(service), name="scheduler:tick")
        await service.act()
        # Lost meanwhile (the rebuild outlasted a renewal that failed): the campaign steps
        # down at its next round; nothing above acted without the fence.
        if await self._fence():
            self.leading.set()
        if self.settings.snapshots:
            # After the takeover is done: the first snapshot must not delay leading.
            self.checkpointer = Checkpointer(
                self.bus,
                store,
                rebuilt.fold,
                stream_created=rebuilt.stream_created,
                written_seq=rebuilt.snapshot_seq or 0,
                min_events=self.settings.snapshot_min_events,
                lease_revision=self._lease_revision,
                clock=self.clock,
            )
            self._checkpoints = asyncio.create_task(
                self._checkpoint_loop(self.checkpointer), name="scheduler:snapshot"
            )

    async def _load_snapshot(self, store: SnapshotStore) -> Snapshot | None:
        """The newest snapshot; None (logged) if NATS does not give it: the rebuild then
        reads the stream, which takes longer but is as right."""
        try:
            return await store.load()
        except (nats.errors.Error, nats.js.errors.Error) as exc:
            log.warning("scheduler snapshot not loaded (%s): rebuilding from the stream", exc)
            return None

    async def _lease_revision(self) -> tuple[int, datetime | None] | None:
        """(revision, bucket creation time) of the lease held now; None (and stepping down)
        if the lease is lost."""
        if self._lease is None or not await self._fence() or self._lease.revision is None:
            return None
        return self._lease.revision, self._lease.epoch

    async def _checkpoint_loop(self, checkpointer: Checkpointer) -> None:
        # The first step comes at once: a takeover that read a long tail (or the whole
        # stream, on a first start) saves the next one that work.
        while not self._stopping.is_set():
            try:
                await checkpointer.step()
            except Exception:  # a failed snapshot is retried at the next interval
                log.exception("scheduler snapshot failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._stopping.wait(), timeout=self.settings.snapshot_interval_seconds
                )

    async def _step_down(self) -> None:
        self.leading.clear()
        if self._checkpoints is not None:
            self._checkpoints.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checkpoints
            self._checkpoints = None
            self.checkpointer = None
        if self._renewal is not None:
            self._renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewal
            self._renewal = None
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        consumers = [c for c in (self._consumer, self._schedule_consumer) if c is not None]
        # Each ends its fetch in flight. A stop cut short by the drain timeout leaves a
        # cancelled fetch task behind, which a second stop reports as cancelled: logged only.
        results = await asyncio.gather(*(c.stop() for c in consumers), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.warning("consumer stop: %r", result)
        self._consumer = self._schedule_consumer = None
        if self.service is not None:
            await self.service.drain()
            self.service = None

    async def _tick_loop(self, service: SchedulerService) -> None:
        while not self._stopping.is_set():
            try:
                await service.tick()
                if self.schedules is not None:
                    await self.schedules.tick()
            except Exception:  # a failed tick is retried at the next one
                log.exception("scheduler tick failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self.settings.tick_seconds)
