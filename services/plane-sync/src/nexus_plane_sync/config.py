"""plane-sync's settings, from the environment (prefix ``NEXUS_``; NATS: ``NEXUS_NATS_*``).

Plane's own settings are ``NEXUS_PLANE_*``. The API key and the webhook secret are secrets:
give them from a Kubernetes Secret / compose environment, never from a file in the repo.
"""

from __future__ import annotations

from typing import Literal

from nexus_events.contract.approver_policy import ApproverDefaultFields
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import Column
from nexus_events.runtime.settings import ConsumerPrefix, HealthPortSetting, ServiceSettings
from pydantic import Field, SecretStr, field_validator, model_validator

# Plane's default states of a new project; a project with renamed states maps them here.
DEFAULT_STATE_MAP: dict[str, str] = {
    Column.BACKLOG: "Backlog",
    Column.TODO: "Todo",
    Column.IN_PROGRESS: "In Progress",
    Column.AWAITING_APPROVAL: "In Progress",
    Column.REVIEW: "In Progress",
    Column.DONE: "Done",
    Column.FAILED: "Todo",
}
# Where a run's events move its work item (board columns, mapped to states above).
DEFAULT_RUN_COLUMNS: dict[str, str] = {
    RunEvent.STARTED: Column.IN_PROGRESS,
    RunEvent.APPROVAL_REQUESTED: Column.AWAITING_APPROVAL,
    RunEvent.APPROVAL_DECIDED: Column.IN_PROGRESS,
    RunEvent.COMPLETED: Column.DONE,
    RunEvent.FAILED: Column.FAILED,
    RunEvent.TIMED_OUT: Column.FAILED,
    RunEvent.LOST: Column.FAILED,
    RunEvent.CANCELLED: Column.TODO,
}
_RUN_EVENT_NAMES = frozenset(e.value for e in RunEvent)
_COLUMN_NAMES = frozenset(c.value for c in Column)


class PlaneSyncSettings(ServiceSettings, ApproverDefaultFields):
    health_port: HealthPortSetting = 8084
    consumer_prefix: ConsumerPrefix = "plane_sync"

    # -- Plane -------------------------------------------------------------------------------
    plane_url: str = Field(..., description="Plane's base URL (the API is under /api/v1/).")
    plane_api_key: SecretStr = Field(..., description="A Plane API key (X-API-Key); a secret.")
    plane_workspace: str = Field(..., min_length=1, description="Workspace slug.")
    plane_project_id: str = Field(..., min_length=1, description="Project of the work items.")
    plane_webhook_secret: SecretStr = Field(
        ..., description="The webhook's secret key (Plane shows it when the webhook is made)."
    )
    plane_agent_runs: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Native agent runs (Plane Cloud/commercial): auto probes the server,"
        " off always uses comments.",
    )
    plane_agent_slug: str = Field("nexus", description="Agent slug of native agent runs.")
    plane_bot_user_id: str | None = Field(
        None,
        description="Plane user of the API key (its changes are echoes); asked of"
        " /users/me/ when unset.",
    )
    plane_trigger_prefix: str = Field(
        "agent:", min_length=1, description="A label `<prefix><agent id>` asks that agent to run."
    )
    plane_flow_prefix: str = Field(
        "flow:",
        min_length=1,
        description="A label `<prefix><flow id>` starts that flow on the work item's task"
        " (removing it cancels the flow runs it started there).",
    )
    plane_assign_agent: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]{1,128}$",
        description="Assigning a work item to the API key's user runs this agent (unassigning"
        " cancels), like the label `<prefix><agent>`; unset: assignment triggers nothing.",
    )
    plane_mirror_tasks: bool = Field(
        True, description="Create work items for tasks made outside Plane (CLI, nats pub)."
    )
    plane_state_map: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_STATE_MAP),
        description="Board column -> Plane state name (JSON).",
    )
    plane_run_columns: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_RUN_COLUMNS),
        description="Run event -> board column its work item moves to (JSON; absent: stays).",
    )
    plane_progress_comments: bool = Field(
        True, description="Keep one comment per run edited with its turns and last tool."
    )
    plane_rate_per_minute: float = Field(
        60.0, gt=0, description="Requests a minute to Plane (its default limit per key)."
    )
    plane_burst: int = Field(
        1, ge=1, description="Requests that may go at once (more can overrun a sliding window)."
    )
    plane_timeout: float = Field(10.0, gt=0, description="Seconds for one Plane request.")
    plane_retries: int = Field(4, ge=0, description="Retries of one request (5xx, timeouts).")
    plane_retry_max: float = Field(
        30.0, gt=0, description="Longest pause between retries (seconds)."
    )
    plane_unknown_task_grace: float = Field(
        60.0,
        gt=0,
        description="Seconds a run's write waits for its task to be known before it fails"
        " (a run on a task id nobody created).",
    )

    @model_validator(mode="after")
    def _prefixes(self) -> PlaneSyncSettings:
        # One label must never be both an agent's and a flow's trigger.
        a, f = self.plane_trigger_prefix, self.plane_flow_prefix
        if a.startswith(f) or f.startswith(a):
            raise ValueError(
                f"NEXUS_PLANE_TRIGGER_PREFIX {a!r} and NEXUS_PLANE_FLOW_PREFIX {f!r} overlap"
            )
        return self

    @field_validator("plane_run_columns")
    @classmethod
    def _run_columns(cls, value: dict[str, str]) -> dict[str, str]:
        # A misspelt event or column would silently never move a work item.
        for event, column in value.items():
            if event not in _RUN_EVENT_NAMES:
                raise ValueError(f"{event!r} is not a run event ({', '.join(RunEvent)})")
            if column not in _COLUMN_NAMES:
                raise ValueError(f"{column!r} is not a board column ({', '.join(Column)})")
        return value

    # -- webhook endpoint ---------------------------------------------------------------------
    webhook_host: str = Field("0.0.0.0", description="Bind address of the webhook endpoint.")  # noqa: S104
    webhook_port: int = Field(8090, ge=0, le=65535, description="Its port (0: any free port).")
    webhook_max_bytes: int = Field(1 << 20, gt=0, description="Largest webhook body accepted.")
    # -- service ---------------------------------------------------------------------------------
    outbox_poll: float = Field(1.0, gt=0, description="Seconds between outbox checks when idle.")
    projection_batch: int = Field(500, gt=0, description="Events per mirror transaction.")
