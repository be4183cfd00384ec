"""Wiring and lifecycle of plane-sync: start everything in order, stop it draining.

Start: the health endpoint, connect NATS (streams created if missing; core owns their
settings), PostgreSQL (schema ``plane_sync``), the Plane client with the shared rate limit,
decide comments or native agent runs (config or a probe), then the mirror (tasks and runs
into the outbox), the outbox writer, the webhook ingress consumer, the webhook endpoint and
the nats.micro endpoints. Stop (SIGTERM) unwinds that in reverse (`ServiceApp`): queries and
the webhook endpoint first, then the consumer finishes what it holds, the writer its write in
hand and the mirror its batch, then connections close and the health endpoint goes last.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter

from nexus_events.contract.streams import FLOWS, RUNS, TASKS
from nexus_events.events import PlaneStatusReply
from nexus_events.runtime.metrics import MetricsSettings, setup_metrics
from nexus_events.runtime.process import ServiceApp
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.fast import Handlers
from nexus_events.transport.projection import ProjectionRunner
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider

from nexus_plane_sync.board import AgentRunReporter, Board, CommentReporter, RunReporter, WorkItems
from nexus_plane_sync.config import PlaneSyncSettings
from nexus_plane_sync.endpoints import PlaneEndpoints
from nexus_plane_sync.errors import PlaneUnavailable
from nexus_plane_sync.ingress import PlaneIngress, ingress_spec
from nexus_plane_sync.metrics import PlaneSyncMetrics
from nexus_plane_sync.mirror import PlaneMirror
from nexus_plane_sync.plane_api import PlaneApi
from nexus_plane_sync.ratelimit import TokenBucket
from nexus_plane_sync.store import PLANE_SCHEMA, PlaneStore
from nexus_plane_sync.webhooks import WebhookServer
from nexus_plane_sync.writer import OutboxWriter

log = logging.getLogger(__name__)

SOURCE = "plane-sync"
# Most seconds a webhook waits for the mirror to apply what the ingress published before it.
MIRROR_WAIT = 2.0


class PlaneSyncApp(ServiceApp):
    """The plane-sync service. `bus` may be given (tests); otherwise it is created."""

    def __init__(
        self,
        settings: PlaneSyncSettings,
        *,
        bus_settings: BusSettings | None = None,
        bus: Bus | None = None,
        schema: str = PLANE_SCHEMA,
        metrics_settings: MetricsSettings | None = None,
    ) -> None:
        self.settings = settings
        self.bus_settings = bus_settings
        self.schema = schema
        super().__init__("plane-sync", bus=bus)
        self.metrics_settings = metrics_settings
        self.meter_provider: SdkMeterProvider | None = None
        self.metrics = PlaneSyncMetrics()
        s = settings
        self.bucket = TokenBucket(s.plane_rate_per_minute / 60.0, s.plane_burst)
        self.api = PlaneApi(
            s.plane_url, s.plane_api_key.get_secret_value(), s.plane_workspace,
            s.plane_project_id, bucket=self.bucket, timeout=s.plane_timeout,
            retries=s.plane_retries, retry_max=s.plane_retry_max,
        )  # fmt: skip
        self.store: PlaneStore | None = None
        self.board: Board | None = None
        self.mirror: PlaneMirror | None = None
        self.runner: ProjectionRunner | None = None
        self.writer: OutboxWriter | None = None
        self.ingress: PlaneIngress | None = None
        # The webhook ingress durable, a FastStream subscriber (nexus_events.transport.fast).
        self.handlers: Handlers | None = None
        self.webhooks: WebhookServer | None = None
        self.endpoints: PlaneEndpoints | None = None

    async def mirrored(self, seqs: dict[str, int]) -> None:
        """Wait (at most MIRROR_WAIT seconds) until the mirror applied these positions of the
        streams it reads (the ingress's own writes) before the ingress reads its tables."""
        if self.runner is None:
            return
        for stream in (TASKS, RUNS, FLOWS):
            seq = seqs.get(stream)
            if seq:
                with contextlib.suppress(TimeoutError):
                    await self.runner.wait_until(stream, seq, within=MIRROR_WAIT)

    def ready(self) -> bool:
        return (
            super().ready()
            and (self.handlers is None or self.handlers.connected)
            and not (self.runner is not None and self.runner.stuck)
        )

    async def _reporter(self, store: PlaneStore) -> RunReporter:
        s = self.settings
        native = s.plane_agent_runs == "on"
        if s.plane_agent_runs == "auto":
            try:
                native = await self.api.has_agent_runs()
            except PlaneUnavailable as exc:
                log.warning("cannot probe Plane for agent runs (%s): using comments", exc)
        if native:
            return AgentRunReporter(self.api, store, s.plane_agent_slug)
        return CommentReporter(self.api, store)

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        s = self.settings
        # Closed even when the start-up below fails (the client exists from __init__).
        stack.push_async_callback(self.api.close)
        await self.open_runtime(
            stack, s, bus_settings=self.bus_settings, source=SOURCE,
            create_pool=lambda: s.create_pool(min_size=2),
        )  # fmt: skip
        self.store = store = PlaneStore(self.pool, self.schema)
        await store.migrate()
        # Exported (OTLP / Prometheus) when configured, as the other services do.
        if self.metrics_settings is not None or MetricsSettings().prometheus_port is not None:
            self.meter_provider = provider = setup_metrics(SOURCE, self.metrics_settings)
            stack.callback(provider.shutdown)
            self.metrics = PlaneSyncMetrics(provider)
        items = WorkItems(
            self.api, store, state_map=s.plane_state_map, mirror_tasks=s.plane_mirror_tasks
        )
        self.board = Board(items, await self._reporter(store))
        self.mirror = PlaneMirror(
            columns=s.plane_run_columns, progress=s.plane_progress_comments,
            mirror_tasks=s.plane_mirror_tasks, schema=self.schema,
        )  # fmt: skip
        self.runner = ProjectionRunner(
            self.bus, self.pool, self.mirror, batch=s.projection_batch,
            fetch_timeout=s.fetch_timeout,
        )  # fmt: skip
        await self.runner.start()
        stack.push_async_callback(self.runner.stop)
        self.writer = OutboxWriter(
            self.bus, store, self.board, self.metrics, poll=s.outbox_poll,
            not_ready_grace=s.plane_unknown_task_grace,
        )  # fmt: skip
        await self.writer.start()
        stack.push_async_callback(self.writer.stop)
        self.ingress = PlaneIngress(
            self.bus, store, self.api, self.metrics,
            trigger_prefix=s.plane_trigger_prefix, flow_prefix=s.plane_flow_prefix,
            bot_user_id=s.plane_bot_user_id,
            assign_agent=s.plane_assign_agent, state_map=s.plane_state_map,
            mirrored=self.mirrored, default_approvers=s.approvers_default, teams=s.teams,
        )  # fmt: skip
        # Its own connection; in-flight webhooks get half the drain timeout to finish.
        self.handlers = Handlers(self.bus, graceful_timeout=s.drain_timeout / 2)
        # Ordered: label changes of one work item must be handled in the order Plane sent them.
        self.handlers.durable(
            ingress_spec(f"{s.consumer_prefix}_webhooks", s.fetch_timeout), ordered=True
        )(self.ingress.on_webhook)
        await self.handlers.start()
        stack.push_async_callback(self.handlers.stop)
        self.webhooks = WebhookServer(
            self.bus, store, s.plane_webhook_secret.get_secret_value().encode(), self.metrics,
            host=s.webhook_host, port=s.webhook_port, max_bytes=s.webhook_max_bytes,
        )  # fmt: skip
        await self.webhooks.start()
        stack.push_async_callback(self.webhooks.stop)
        self.endpoints = PlaneEndpoints(self.bus, store, self.writer, self.status)
        await self.endpoints.start()
        stack.push_async_callback(self.endpoints.stop)
        log.info("plane-sync: %s, webhooks on port %d", self.board.mode, self.webhooks.port)

    def status(self, counts: dict[str, int], webhooks: dict[str, int]) -> PlaneStatusReply:
        """`webhooks`: the saved totals (they outlive a restart), plus what the endpoint
        counted and has not saved yet."""
        assert self.board is not None
        s = self.settings
        totals = Counter(webhooks)
        if self.webhooks is not None:
            totals.update(self.webhooks.unsaved)
        return PlaneStatusReply(
            plane_url=s.plane_url,
            workspace=s.plane_workspace,
            project_id=s.plane_project_id,
            mode=self.board.mode,
            plane_reachable=self.api.reachable,
            pending_writes=counts.get("pending", 0),
            failed_writes=counts.get("failed", 0),
            done_writes=counts.get("done", 0),
            coalesced_writes=counts.get("coalesced", 0),
            tasks=counts.get("tasks", 0),
            webhooks=dict(totals),
            last_error=self.api.last_error,
        )
