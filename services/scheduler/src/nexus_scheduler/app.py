"""Wiring and lifecycle: bus, runtime, leadership, replay, consumer, ticker; drain on stop.

Replicas campaign for a KV lease (`nexus_events.runtime.leadership.Leadership`, as core, memory and
flows do); only the holder consumes and acts, and fences each side effect with the lease. On
taking the lease a replica rebuilds admission from the newest snapshot and the NEXUS_RUNS
events after it (so it neither loses queued runs nor exceeds the limits; heartbeats only of
open runs, see `nexus_scheduler.rebuild`), re-adopts the runs its runtime still has (runs it
does not know are marked `lost` only after the heartbeat window), then follows the stream,
ticks, and writes a snapshot now and then (`nexus_scheduler.checkpoint`), each a
`nexus_events.runtime.periodic.PeriodicTask`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

import nats.errors
import nats.js.errors
from nexus_events.contract import subjects
from nexus_events.contract.streams import INBOX, RUNS, SCHEDULES, StreamSettings
from nexus_events.events import RunConfig
from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.runtime.leadership import Leadership
from nexus_events.runtime.lease import Lease, LeaseTerm
from nexus_events.runtime.metrics import MetricsSettings, setup_metrics
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.runtime.process import ServiceApp
from nexus_events.transport.bus import Bus, BusSettings, Consumer, ConsumerSpec

from nexus_scheduler.agent_schedules import AgentSchedules
from nexus_scheduler.auth_callout import AuthCalloutResponder
from nexus_scheduler.callout_jwt import Issuer
from nexus_scheduler.checkpoint import Checkpointer
from nexus_scheduler.config import SchedulerSettings
from nexus_scheduler.handlers import (
    create_inbox_handler,
    create_run_handler,
    create_schedule_handler,
)
from nexus_scheduler.metrics import SchedulerMetrics
from nexus_scheduler.rebuild import rebuild
from nexus_scheduler.run_credentials import SLOT_CREDENTIAL_TTL_SECONDS, RunCredentialMinter
from nexus_scheduler.runtime.base import AgentRuntime
from nexus_scheduler.schedules_service import ScheduleService
from nexus_scheduler.service import SchedulerService, watched_subjects
from nexus_scheduler.snapshot import Snapshot
from nexus_scheduler.snapshot_store import SnapshotStore
from nexus_scheduler.spend_admission import SpendAdmission

log = logging.getLogger(__name__)

SOURCE = "scheduler"


def run_credentials(settings: SchedulerSettings) -> Callable[[RunConfig], dict[str, str]] | None:
    """What gives each runner its run's own NATS credential; None without a callout seed."""
    if settings.auth_callout_seed is None:
        return None
    seed = settings.auth_callout_seed.get_secret_value().encode()
    minter = RunCredentialMinter(seed, min_ttl=settings.run_credential_min_ttl_seconds)
    return lambda config: minter.runner_nats_env(config, time.time())


def slot_credentials(settings: SchedulerSettings) -> Callable[[str], dict[str, str]] | None:
    """What gives a warm pod its slot credential (Kubernetes); None without a callout seed:
    a warm pod needs a credential of its own, so there is no pool then."""
    if settings.auth_callout_seed is None:
        return None
    seed = settings.auth_callout_seed.get_secret_value().encode()
    minter = RunCredentialMinter(seed, min_ttl=settings.run_credential_min_ttl_seconds)
    return lambda slot: minter.slot_nats_env(slot, time.time(), SLOT_CREDENTIAL_TTL_SECONDS)


def build_runtime(settings: SchedulerSettings) -> AgentRuntime:
    credentials = run_credentials(settings)
    if settings.runtime == "kubernetes":
        from nexus_scheduler.runtime.kubernetes import KubernetesRuntime, KubernetesSettings

        return KubernetesRuntime(
            KubernetesSettings.from_scheduler(settings),
            credentials=credentials,
            warm_pool=settings.k8s_warm_pool if credentials else None,
            slot_credentials=slot_credentials(settings),
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
        warm_pool=settings.warm_pool,
        warm_pool_max=settings.warm_pool_max,
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
        self.agent_schedules: AgentSchedules | None = None
        self._schedule_consumer: Consumer | None = None
        self._inbox_consumer: Consumer | None = None
        self.leadership: Leadership | None = None
        self._replicas = 1
        self._consumer: Consumer | None = None
        self._stopping = asyncio.Event()
        self._ticks: PeriodicTask | None = None
        self._checkpoints: PeriodicTask | None = None
        self.checkpointer: Checkpointer | None = None

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        bus = await self.open_runtime(
            stack,
            self.settings,
            bus_settings=self.bus_settings,
            source=SOURCE,
            probe_streams=[RUNS, SCHEDULES],
            probe_interval=self.settings.jetstream_probe_seconds,
            connected=self._answer_auth_callout,
        )
        if self.metrics is None:
            provider = setup_metrics("scheduler", MetricsSettings())
            stack.callback(provider.shutdown)
            self.metrics = SchedulerMetrics(provider)
        # The local runtime counts warm and cold starts (docs/warm-starts.md).
        attach_metrics = getattr(self.runtime, "attach_metrics", None)
        if attach_metrics is not None:
            attach_metrics(self.metrics)
        # Kubernetes warm pods are handed their runs over the scheduler's own connection.
        attach_nats = getattr(self.runtime, "attach_nats", None)
        if attach_nats is not None:
            attach_nats(bus.nc)
        await self.runtime.start()
        stack.push_async_callback(self._close_runtime)
        # The lease and snapshot buckets are replicated like the streams (NEXUS_STREAMS_REPLICAS).
        self._replicas = StreamSettings().replicas
        self.leadership = leadership = Leadership(
            bus.js,
            service="scheduler",
            bucket=self.settings.lease_bucket,
            ttl=self.settings.lease_ttl_seconds,
            lead=self._lead,
            step_down=self._step_down,
            replicas=self._replicas,
            holder=self.settings.replica_id,
        )
        # Last of the two: after a drain cut short, this one still hands the lease over.
        stack.push_async_callback(leadership.stop)
        # The first round in the background: a takeover's rebuild does not hold up start.
        await leadership.start(first_round="background")
        stack.push_async_callback(self._drain_bounded)

    async def _answer_auth_callout(self, bus: Bus, stack: contextlib.AsyncExitStack) -> None:
        if self.settings.auth_callout_seed is not None:
            # Every replica answers (a queue group): runners connect whoever leads.
            issuer = Issuer(self.settings.auth_callout_seed.get_secret_value())
            responder = AuthCalloutResponder(bus.nc, issuer)
            await responder.start()
            stack.push_async_callback(responder.stop)

    @property
    def _lease(self) -> Lease | None:
        """The lease campaigned for (tests reach it to play a deposed leader)."""
        return self.leadership.lease if self.leadership is not None else None

    @property
    def _campaign(self) -> asyncio.Task[None] | None:
        """The leadership's campaign task (a test's crash cancels it)."""
        return self.leadership.campaign if self.leadership is not None else None

    @property
    def _ticker(self) -> asyncio.Task[None] | None:
        """The running tick loop (a test's crash cancels it)."""
        return self._ticks.task if self._ticks is not None else None

    async def _close_runtime(self) -> None:
        await self.runtime.close()  # the runtime as it is at stop (tests swap its close)

    def ready(self) -> bool:
        """Connected to NATS, JetStream electing no leader for NEXUS_RUNS or NEXUS_SCHEDULES
        (nothing could be dispatched or recorded meanwhile), and campaigning for the lease
        (leading or standing by), not stopping: a standby replica is ready to take over."""
        return (
            self._running
            and not self._stopping.is_set()
            and self.nats_connected
            and self.jetstream is not None
            and self.jetstream.ok
            and self.leadership is not None
            and self.leadership.campaigning
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
        # The campaign ends (a takeover under way finishes first), then the leadership steps
        # down (`_step_down`) and hands the lease over.
        if self.leadership is not None:
            await self.leadership.stop()

    async def _abandon(self) -> None:
        """After a drain timeout (the stop above was cancelled, and the campaign or step-down
        it awaited with it): cancel the starts still in flight, then step down without
        waiting for them; the lease is handed over by the second `Leadership.stop`."""
        if self.service is not None:
            await self.service.abandon()
        await self._step_down()

    async def _fence(self) -> bool:
        """Whether this replica may still act as the leader; False also clears `leading` at
        once, and the leadership steps down (so a replica that lost the lease stops consuming
        before it can bounce the leader's messages again)."""
        held = self.leadership is not None and await self.leadership.fence()
        if not held:
            self.leading.clear()
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
            spend=SpendAdmission(
                self.bus.nc,
                timeout=self.settings.budget_admission_timeout_seconds,
                enabled=self.settings.budget_admission == "check",
            ),
            budget_recheck_seconds=self.settings.budget_recheck_seconds,
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
        # Messages to runs' inboxes: one to a sleeping run wakes it (docs/resume.md, Sleep).
        # After the rebuild, so a redelivered message finds the run asleep; a message older
        # than the sleep wakes nothing.
        self._inbox_consumer = self.bus.consumer(
            ConsumerSpec(
                stream=INBOX,
                durable=f"{self.settings.consumer_name}-inbox",
                filter_subjects=(subjects.family_filter(subjects.Family.INBOX),),
                batch=200,
            ),
            create_inbox_handler(service),
        )
        await self._inbox_consumer.start()
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
        # After every schedule is loaded: the agents' cap counts them all.
        self.agent_schedules = AgentSchedules(
            self.bus,
            lambda run_id: _live_config(service, run_id),
            self.schedules,
            limit=self.settings.agent_schedules_max,
            clock=self.clock,
        )
        await self.agent_schedules.start()
        self._ticks = PeriodicTask(
            lambda: self._tick(service),
            self.settings.tick_seconds,
            name="scheduler tick",
            stop_grace=0,  # cut on a step-down: it acts only under the fence
            logger=log,
        )
        self._ticks.start()
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
                lease_revision=self._lease_term,
                clock=self.clock,
            )
            # The first step comes at once: a takeover that read a long tail (or the whole
            # stream, on a first start) saves the next one that work. A failed snapshot is
            # retried at the next interval.
            self._checkpoints = PeriodicTask(
                self.checkpointer.step,
                self.settings.snapshot_interval_seconds,
                name="scheduler snapshot",
                stop_grace=0,
                logger=log,
            )
            self._checkpoints.start()

    async def _load_snapshot(self, store: SnapshotStore) -> Snapshot | None:
        """The newest snapshot; None (logged) if NATS does not give it: the rebuild then
        reads the stream, which takes longer but is as right."""
        try:
            return await store.load()
        except (nats.errors.Error, nats.js.errors.Error) as exc:
            log.warning("scheduler snapshot not loaded (%s): rebuilding from the stream", exc)
            return None

    async def _lease_term(self) -> LeaseTerm | None:
        """The fence token of the lease held now; None (and stepping down) if it is lost."""
        if self.leadership is None:
            return None
        term = await self.leadership.term()
        if term is None:
            self.leading.clear()
        return term

    async def _step_down(self) -> None:
        self.leading.clear()
        agent_schedules, self.agent_schedules = self.agent_schedules, None
        if agent_schedules is not None:
            await agent_schedules.stop()
        # A snapshot or tick in hand is cancelled (each acts only under the fence).
        if self._checkpoints is not None:
            await self._checkpoints.stop()
            self._checkpoints = None
            self.checkpointer = None
        if self._ticks is not None:
            await self._ticks.stop()
            self._ticks = None
        consumers = [
            c
            for c in (self._consumer, self._schedule_consumer, self._inbox_consumer)
            if c is not None
        ]
        # Each ends its fetch in flight. A stop cut short by the drain timeout leaves a
        # cancelled fetch task behind, which a second stop reports as cancelled: logged only.
        results = await asyncio.gather(*(c.stop() for c in consumers), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.warning("consumer stop: %r", result)
        self._consumer = self._schedule_consumer = self._inbox_consumer = None
        if self.service is not None:
            await self.service.drain()
            self.service = None

    async def _tick(self, service: SchedulerService) -> None:
        await service.tick()
        if self.schedules is not None:
            await self.schedules.tick()


def _live_config(service: SchedulerService, run_id: str) -> RunConfig | None:
    entry = service.state.runs.get(run_id)
    return None if entry is None else entry.config
