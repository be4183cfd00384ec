"""The runner's settings: one pydantic-settings class, env prefix ``NEXUS_`` (formerly
``NEXUS_RUNNER_``, still read with a warning)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from nexus_events.runtime.settings import NexusSettings
from pydantic import BaseModel, ConfigDict, Field, SecretStr


class Price(BaseModel):
    """USD per million tokens of one model."""

    model_config = ConfigDict(frozen=True)

    input_per_mtok: float = Field(0.0, ge=0, description="USD per 1M prompt tokens.")
    output_per_mtok: float = Field(0.0, ge=0, description="USD per 1M completion tokens.")


# Public list prices (USD per 1M tokens) of common models; unknown models cost 0 unless the
# operator adds them (NEXUS_PRICES='{"my-model": {...}}').
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(input_per_mtok=2.5, output_per_mtok=10.0),
    "gpt-4o-mini": Price(input_per_mtok=0.15, output_per_mtok=0.6),
    "gpt-4.1": Price(input_per_mtok=2.0, output_per_mtok=8.0),
    "gpt-4.1-mini": Price(input_per_mtok=0.4, output_per_mtok=1.6),
}


class RunnerSettings(NexusSettings):
    """Everything tunable about the runner. Env: NEXUS_<FIELD>."""

    old_env_prefix = "NEXUS_RUNNER_"

    # In a pod the workspace is an emptyDir mounted at /tmp; locally override it.
    workspace_root: Path = Field(
        Path("/tmp/nexus-runs"),  # noqa: S108
        description="Parent of workspaces.",
    )
    # LLM access
    llm_api_key: str = Field("not-needed", description="API key for the model server.")
    llm_base_url: str | None = Field(None, description="Default base URL when the model has none.")
    llm_timeout: float = Field(120.0, gt=0, description="Seconds for one model call.")
    llm_max_attempts: int = Field(5, ge=1, description="Attempts of one model call.")
    retry_base_delay: float = Field(1.0, ge=0, description="First retry delay, doubled each time.")
    retry_max_delay: float = Field(60.0, ge=0, description="Cap of one retry delay.")
    stream: bool = Field(True, description="Stream completions (text deltas go to NEXUS_LOGS).")
    prices: dict[str, Price] = Field(default_factory=lambda: dict(DEFAULT_PRICES))
    # Budgets (docs/spend.md): each model call is reserved with the spend service first.
    budget_reservations: Literal["enforce", "off"] = Field(
        "enforce",
        description="enforce: reserve every model call with the spend service and wait (never"
        " call unreserved) while it does not answer; off: no reservations (a deployment"
        " without budgets).",
    )
    budget_retry_seconds: float = Field(
        5.0,
        gt=0,
        description="Seconds between asks while a budget's ask is open or no spend service"
        " answers.",
    )
    # Liveness and control
    heartbeat_interval: float = Field(15.0, gt=0, description="Seconds between heartbeats.")
    approval_timeout: float = Field(900.0, gt=0, description="Seconds before approval expires.")
    # Stuck detection: the same call with the same result N times, or N turns without progress.
    stuck_repeat_threshold: int = Field(3, ge=2)
    stuck_idle_turns: int = Field(8, ge=1)
    # Typed outputs (nexus_runner.output)
    output_retries: int = Field(
        2,
        ge=0,
        description="Times the model is asked again when finish.details does not fit the"
        " agent's output_schema; the next misfit fails the run (invalid_output).",
    )
    # Tools
    shell_timeout: float = Field(300.0, gt=0, description="Default run_shell timeout (s).")
    output_cap: int = Field(20_000, gt=0, description="Characters of tool output for the model.")
    event_output_cap: int = Field(4_000, gt=0, description="Characters of output in events.")
    log_chunk_chars: int = Field(512, gt=0, description="Buffer LLM deltas up to this size.")
    remember_timeout: float = Field(
        5.0,
        gt=0,
        description="Seconds the `remember` tool waits for the memory service to record.",
    )
    schedules_timeout: float = Field(
        5.0,
        gt=0,
        description="Seconds the schedule_* tools wait for the scheduler to answer.",
    )
    # The tools' own sandbox (nexus_runner.tool_sandbox): run_shell, run_tests, acceptance
    # and MCP stdio servers run apart from the runner (its network, processes, files).
    tool_sandbox: Literal["auto", "on", "off"] = Field(
        "auto",
        description="auto: sandbox the tools' commands when bubblewrap works here, else warn"
        " once and run them as the runner; on: refuse a command that cannot be sandboxed;"
        " off: never sandbox.",
    )
    tool_sandbox_readable: list[Path] = Field(
        default_factory=list,
        description="More host paths the tools' sandbox shows read-only (what a team's"
        " toolchain needs beyond the OS and the interpreters on PATH); JSON list.",
    )
    # MCP servers (nexus_runner.tools.mcp). Secrets are named in agent definitions
    # (`mcp_servers[].env: {VAR: secret-name}`) and resolved only from this mapping.
    mcp_secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Named secrets for MCP servers' environments (JSON object name -> value).",
    )
    mcp_path: str = Field(
        "/usr/local/bin:/usr/bin:/bin",
        description="PATH given to stdio MCP servers (nothing else is inherited).",
    )
    mcp_startup_timeout: float = Field(
        30.0, gt=0, description="Seconds for an MCP server to start and list its tools."
    )
    mcp_call_timeout: float = Field(30.0, gt=0, description="Seconds for one MCP tool call.")
    mcp_max_restarts: int = Field(
        3, ge=0, description="Restarts of a crashed MCP server before its tools are withdrawn."
    )
    mcp_restart_backoff: float = Field(
        1.0, ge=0, description="First MCP restart delay (s), doubled each time."
    )
    # Sandboxed tools (nexus_runner.sandbox): run-wide bounds of their key/value state.
    sandbox_state_max_keys: int = Field(
        1_000, ge=1, description="Keys in a run's sandbox state (all its sandboxed tools)."
    )
    sandbox_state_max_bytes: int = Field(
        16 << 20, ge=1, description="Bytes of keys and JSON values in a run's sandbox state."
    )
    # Git
    git_author_name: str = Field("Nexus Agent", description="Author of the runner's commits.")
    git_author_email: str = Field("agent@nexus.local", description="Author email.")
    git_remote: str = Field("origin", description="Remote to push to.")
    # Pull requests (GitHub REST). The token is a SecretStr: it prints as '**********' and
    # is only ever sent in the provider's Authorization header, never in events or logs.
    github_token: SecretStr | None = Field(None, description="Token for opening pull requests.")
    github_api_url: str = Field("https://api.github.com", description="GitHub REST API base.")
    github_repository: str | None = Field(
        None, description="owner/name for pull requests; default: parsed from the remote URL."
    )
    # Acceptance
    acceptance_command: str | None = Field(None, description="Overrides test detection.")
    acceptance_report_only: bool = Field(False, description="Record failure, still complete.")
    acceptance_timeout: float = Field(900.0, gt=0)
    # Context management (nexus_runner.context): what the runner sends stays within the budget
    # of the model's window; older tool output is elided, then the middle summarised.
    context_default_tokens: int = Field(
        32_768,
        gt=0,
        description="Context window of a model the runner does not know and whose agent sets no"
        " model.context_tokens. Unknown names are mostly self-hosted open-weight models, which"
        " are commonly served at 32k: too small only condenses early, too large fails the run.",
    )
    context_margin: float = Field(
        0.05,
        ge=0,
        lt=0.5,
        description="Share of the window left unused for what counting cannot see exactly (the"
        " provider's rendering of tool schemas and messages).",
    )
    context_keep_turns: int = Field(
        3, ge=1, description="Last turns always kept whole (with the system prompt and task)."
    )
    context_target: float = Field(
        0.75,
        gt=0,
        le=1,
        description="Share of the budget a condensation aims at, so the next turns do not"
        " condense again at once (fewer summaries; provider prompt caches last longer).",
    )
    context_summary_tokens: int = Field(
        2_000, gt=0, description="Most tokens of a summary of the middle of the conversation."
    )
