"""Scheduler settings (env prefix NEXUS_, formerly NEXUS_SCHEDULER_, still read with a
warning; NATS settings come from NEXUS_NATS_)."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path
from typing import Literal

from nexus_events.runtime.settings import HealthPortSetting, NexusSettings
from pydantic import Field, SecretStr

from nexus_scheduler.admission import Limits, Timeouts


class SchedulerSettings(NexusSettings):
    # Not a ServiceSettings: its drain (drain_timeout_seconds) and consumer (consumer_name)
    # have their own names, and it has no database; the shared ones would be new variables.
    old_env_prefix = "NEXUS_SCHEDULER_"

    replica_id: str = Field(
        default_factory=socket.gethostname, description="This replica's name in the lease."
    )
    runtime: Literal["local", "kubernetes"] = Field("local", description="Where runs go.")

    # Admission limits; None = unlimited. Per-agent precedence: `agent_limits[agent]`, then
    # the agent definition's `max_concurrent_runs` (in the RunConfig), then
    # `max_runs_per_agent`.
    max_concurrent_runs: int | None = Field(20, gt=0, description="Global limit.")
    max_runs_per_agent: int | None = Field(
        None,
        gt=0,
        description="Default per-agent limit, for agents whose definition sets none.",
    )
    max_runs_per_task: int | None = Field(None, gt=0, description="Per-task limit.")
    agent_limits: dict[str, int] = Field(
        default_factory=dict,
        description="Per-agent overrides, e.g. {'reviewer': 2}; win over the definition's.",
    )

    # Budgets (docs/spend.md): the spend service is asked before each first dispatch.
    budget_admission: Literal["check", "off"] = Field(
        "check",
        description="check: ask nexus.spend.v1.admit before dispatching a run (no answer"
        " admits it: the runner's reservations still hold it); off: never ask.",
    )
    budget_admission_timeout_seconds: float = Field(
        2.0, gt=0, description="Most a dispatch waits for the spend service's answer."
    )
    budget_recheck_seconds: float = Field(
        5.0,
        gt=0,
        description="A run a budget holds queued is asked about again after this long (or"
        " at once when a run ends or a budget is extended).",
    )

    # Timers (seconds).
    cancel_grace_seconds: float = Field(30.0, ge=0, description="Cooperative stop window.")
    heartbeat_timeout_seconds: float = Field(
        90.0,
        gt=0,
        description="No heartbeat this long -> lost (runner beats every ~15 s); a restarted "
        "scheduler gives a run its runtime does not know this long too.",
    )
    start_timeout_seconds: float = Field(
        300.0, gt=0, description="Dispatched but never started this long -> lost (image pulls)."
    )
    exit_grace_seconds: float = Field(
        10.0, ge=0, description="Wait for the runner's own terminal event after its exit."
    )
    tick_seconds: float = Field(1.0, gt=0, description="How often timers and runtimes are checked.")
    drain_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description="Most a stop waits for the batch in hand and the runtime starts in flight;"
        " past it the scheduler stops anyway (and logs what it abandoned). Keep it below the"
        " pod's terminationGracePeriodSeconds.",
    )

    # Leadership: one active scheduler; the others wait for the lease.
    lease_bucket: str = Field("nexus_scheduler", description="JetStream KV bucket of the lease.")
    lease_ttl_seconds: float = Field(15.0, gt=0, description="A dead leader is replaced after it.")
    consumer_name: str = Field(
        "scheduler",
        description="Durable consumer on NEXUS_RUNS (and `<name>-schedules` on NEXUS_SCHEDULES,"
        " `<name>-inbox` on NEXUS_INBOX: a message wakes a sleeping run).",
    )

    # Snapshots of the admission state, so a takeover reads the events since the last one
    # instead of the stream's history (nexus_scheduler.rebuild).
    snapshots: bool = Field(
        True,
        description="Write admission snapshots and start takeovers from them (off: every"
        " takeover reads the lifecycle events of the whole stream).",
    )
    snapshot_bucket: str = Field(
        "nexus_scheduler_snapshot", description="JetStream KV bucket of the snapshots."
    )
    snapshot_interval_seconds: float = Field(
        60.0, gt=0, description="How often the leader considers writing a snapshot."
    )
    snapshot_min_events: int = Field(
        1000,
        ge=1,
        description="Write one only once NEXUS_RUNS grew by this many messages since the last"
        " (a quiet stream is not snapshotted again and again).",
    )

    # Schedules.
    schedule_jitter_cap_seconds: float = Field(
        60.0, ge=0, description="Most a fire is delayed by its schedule's fixed jitter."
    )
    schedule_misfire_grace_seconds: float = Field(
        300.0, ge=0, description="A fire later than this is missed (after downtime)."
    )
    schedule_missed_policy: Literal["skip", "catch_up_one"] = Field(
        "skip", description="Missed fires of schedules that set no `missed_policy`."
    )
    schedule_overlap_policy: Literal["skip", "queue", "cancel_previous"] = Field(
        "queue",
        description="A fire while the previous run is active, for schedules that set no"
        " `overlap_policy`.",
    )
    agent_schedules_max: int = Field(
        50,
        ge=0,
        description="Most schedules one agent may have made with `schedule_create` (docs/"
        "schedules.md); 0 = agents may make none.",
    )

    # Run credentials (docs/deploy.md, "The run credential"). With a seed, the scheduler
    # answers nats-server's auth callout and gives each runner a credential of its own run.
    auth_callout_seed: SecretStr | None = Field(
        None,
        description="Account nkey seed (SA...) of the NATS auth callout issuer; the server's"
        " auth_callout.issuer is its public key (docs/deploy.md shows how to make both).",
    )
    run_credential_min_ttl_seconds: float = Field(
        86_400.0,
        gt=0,
        description="Least lifetime of a run's NATS credential (longer for a longer wall budget).",
    )

    # Probes. 8081, not core's 8080: both may run on one host (a laptop, `docker run`).
    health_host: str = Field("127.0.0.1", description="Bind address of the health endpoint.")
    health_port: HealthPortSetting = 8081
    jetstream_probe_seconds: float = Field(
        2.0,
        gt=0,
        description="Readiness checks this often that JetStream has a leader for NEXUS_RUNS"
        " and NEXUS_SCHEDULES (not ready through an election).",
    )

    # Local runtime.
    local_workdir: Path = Field(
        default_factory=lambda: Path(tempfile.gettempdir()) / "nexus-runs",
        description="Run dirs of local runs.",
    )
    local_command: list[str] = Field(
        default_factory=lambda: ["python", "-m", "nexus_runner"],
        description="Runner command; `--config FILE` is appended.",
    )
    confinement: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Local runners under bubblewrap (runtime/confinement.py): auto = when bwrap"
        " works here, on = refuse to start unconfined, off = never (logged as a warning).",
    )
    local_kill_grace_seconds: float = Field(10.0, ge=0, description="SIGTERM -> SIGKILL.")
    local_pass_env: list[str] = Field(
        default_factory=list,
        description="More variables passed from the scheduler's environment to local runners"
        " (which otherwise get only the ones they read; runtime/runner_env.py).",
    )
    local_finished_kept: int = Field(
        1000, ge=1, description="Ended runner processes remembered (their exit code)."
    )
    local_finished_ttl_seconds: float = Field(
        3600.0, gt=0, description="An ended runner process is forgotten after this long."
    )
    warm_pool: dict[str, int] = Field(
        default_factory=lambda: {"default": 1},
        description="Warm local runners kept idle per agent id ('default': every other"
        " agent), e.g. {'default': 1, 'reviewer': 2}; 0 = none (docs/warm-starts.md).",
    )
    warm_pool_max: int = Field(
        4, ge=0, description="Most warm local runners idle at once, all agents (0 = none)."
    )

    # Kubernetes runtime.
    k8s_namespace: str = Field("nexus-runs", description="Namespace of run Jobs.")
    k8s_image: str = Field("ghcr.io/nexus/runner:latest", description="Default runner image.")
    k8s_in_cluster: bool = Field(True, description="Use the pod's service account config.")
    k8s_ttl_after_finished_seconds: int = Field(3600, ge=0, description="Job GC delay.")
    k8s_service_account: str | None = Field(None, description="Runner pods' service account.")
    k8s_request_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description="Client-side timeout of every Kubernetes API call (a hung API server"
        " fails the call instead of stalling the scheduler).",
    )
    k8s_runtime_class: str | None = Field(
        None,
        description="RuntimeClass of runner pods, e.g. 'runsc' for gVisor (a kernel of its own"
        " between the run and the node; deploy/k8s/extras/gvisor-runtimeclass.yaml). None:"
        " the cluster's default runtime.",
    )
    k8s_runner_env_secret: str | None = Field(
        "runner-env", description="Secret whose keys become the runner pods' env (NATS, LLM)."
    )
    k8s_warm_pool: dict[str, int] = Field(
        default_factory=dict,
        description="Warm runner pods kept idle per agent id ('default': every other agent),"
        " e.g. {'default': 1, 'reviewer': 2}; none by default: idle pods cost (needs the auth"
        " callout; docs/warm-starts.md).",
    )

    def limits(self) -> Limits:
        return Limits(
            global_max=self.max_concurrent_runs,
            agent_default=self.max_runs_per_agent,
            task_max=self.max_runs_per_task,
            per_agent=dict(self.agent_limits),
        )

    def timeouts(self) -> Timeouts:
        return Timeouts(
            cancel_grace=self.cancel_grace_seconds,
            heartbeat_timeout=self.heartbeat_timeout_seconds,
            start_timeout=self.start_timeout_seconds,
        )
