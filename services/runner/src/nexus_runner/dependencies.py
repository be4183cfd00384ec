"""What one run is built from: its secrets, workspace, tool context and sandbox, model client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from nexus_events.events.runs import RunConfig
from nexus_events.runtime.clock import SleepingClock
from nexus_events.transport.bus import Bus
from openai import AsyncOpenAI

from nexus_runner.config import RunnerSettings
from nexus_runner.containment import track_runner, track_workspace
from nexus_runner.control import RunControl
from nexus_runner.delegation import Delegation
from nexus_runner.errors import RunnerError
from nexus_runner.finishing import configured_test_command
from nexus_runner.git import Git
from nexus_runner.leftovers import clear_workspace
from nexus_runner.llm import CallGate, LlmClient, RetryPolicy
from nexus_runner.loop import AgentLoop
from nexus_runner.provider import GitHubProvider, GitProvider
from nexus_runner.publisher import RunPublisher
from nexus_runner.safety import SecretRegistry
from nexus_runner.sandbox import StateCap
from nexus_runner.spend import SpendGate
from nexus_runner.tool_sandbox import UNSANDBOXED, ToolSandbox
from nexus_runner.tools import ToolContext
from nexus_runner.tools.memory import RunMemory, RunScopes
from nexus_runner.tools.schedules import RunSchedules
from nexus_runner.workspace import Workspace


async def prepare_workspace(
    config: RunConfig, settings: RunnerSettings, git: Git, branch: str
) -> tuple[str | None, str | None]:
    """Clone the repo (or init an empty one); return (base sha, base branch).

    Attempt 2 and later first clear what the dead attempt left at the workspace path (its
    clone, files its tools wrote before any checkpoint): the new attempt starts from a clean
    clone, then its last checkpoint if there is one (docs/resume.md)."""
    root = git.root
    if config.attempt > 1:
        try:
            await asyncio.to_thread(clear_workspace, root)
        except (OSError, RecursionError) as exc:  # deeper than rmtree walks: unclearable
            raise RunnerError(f"workspace {root} left by attempt {config.attempt - 1}"
                              f" cannot be cleared: {exc}") from exc  # fmt: skip
    if config.repo is None:
        root.mkdir(parents=True, exist_ok=True)
        await git.run("init", "--quiet", "-b", branch)
        return None, None
    if root.exists() and any(root.iterdir()):
        raise RunnerError(f"workspace {root} is not empty")
    base_sha = await git.clone(config.repo.url, config.repo.ref, branch, settings.git_remote)
    track_workspace(git.secrets, root)  # its `.env`-like files, before the agent reads them
    base_branch = config.repo.ref
    if base_branch is None:
        remote_head = f"refs/remotes/{settings.git_remote}/HEAD"
        head = await git.run("symbolic-ref", "--short", remote_head, check=False)
        prefix = f"{settings.git_remote}/"
        base_branch = head.output.strip().removeprefix(prefix) if head.ok else "main"
    return base_sha, base_branch


def tool_home(root: Path) -> Path:
    """A HOME of the run's own for its shell commands, beside the workspace."""
    home = root.parent / f"{root.name}.home"
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return home


def run_secrets(config: RunConfig, settings: RunnerSettings) -> SecretRegistry:
    """The run's secret values, to start with its own settings and environment (then the
    workspace's `.env`-like files once cloned, what it reads outside the workspace as it
    works): redacted from every event and log line, tool output, commit and push."""
    secrets = SecretRegistry()
    repo = config.repo
    secrets.allow(
        config.run_id,
        config.agent_id,
        config.task_id,
        *((repo.url, repo.ref, repo.branch) if repo else ()),
        str(settings.workspace_root),
        str(settings.workspace_root / config.run_id),
    )
    track_runner(secrets, settings)
    return secrets


def tool_context(  # noqa: PLR0917
    config: RunConfig,
    settings: RunnerSettings,
    bus: Bus,
    control: RunControl,
    ws: Workspace,
    git: Git,
    secrets: SecretRegistry,
    approve: Callable[[str, str], Coroutine[Any, Any, bool]] | None = None,
    sandbox: ToolSandbox = UNSANDBOXED,
) -> ToolContext:
    """What the run's tools act on, in the cloned workspace."""
    return ToolContext(
        workspace=ws,
        git=Git(ws.root, git.author, secrets),
        shell_timeout=settings.shell_timeout,
        output_cap=settings.output_cap,
        # Chosen before the agent runs: it cannot add a Makefile to pick another.
        test_command=configured_test_command(config, settings, ws.root),
        secrets=secrets,
        home=tool_home(ws.root),
        memory=RunMemory(
            bus.nc, config.run_id, RunScopes.of(config), timeout=settings.remember_timeout
        ),
        schedules=RunSchedules(bus.nc, config.run_id, timeout=settings.schedules_timeout),
        delegate=Delegation(
            bus,
            control,
            run_id=config.run_id,
            agent_id=config.agent_id,
            task_id=config.task_id,
        ),
        approve=approve,
        state_cap=StateCap(settings.sandbox_state_max_keys, settings.sandbox_state_max_bytes),
        sandbox=sandbox,
        skills={s.name: s.content for s in config.skills if s.on_demand},
        max_sleep_seconds=config.resume.max_sleep_seconds,
    )


def tool_sandbox(settings: RunnerSettings) -> ToolSandbox:
    """Decide (probing bwrap once) where the agent's commands run: never binding in the
    runner's cwd (its run dir), its HOME, nor the workspace root (other runs)."""
    return ToolSandbox.detect(
        settings.tool_sandbox,
        allow=settings.tool_sandbox_readable,
        forbidden=[Path.cwd(), Path.home()],
        private=[settings.workspace_root],
    )


def runner_urls(config: RunConfig, settings: RunnerSettings, bus: Bus) -> list[str | None]:
    """The runner's own endpoints, which the tools' egress never reaches: the model, NATS."""
    return [config.model.base_url or settings.llm_base_url, *bus.settings.url.split(",")]


def default_provider(config: RunConfig, settings: RunnerSettings) -> GitProvider | None:
    """GitHub, when the runner has a token and the run may open a pull request."""
    if settings.github_token is None or not config.permissions.can_open_pr:
        return None
    return GitHubProvider(
        settings.github_token.get_secret_value(),
        settings.github_api_url,
        repository=settings.github_repository,
    )


def openai_client(config: RunConfig, settings: RunnerSettings) -> AsyncOpenAI:
    """The model's API client, for the run's model endpoint."""
    return AsyncOpenAI(
        api_key=settings.llm_api_key,
        base_url=config.model.base_url or settings.llm_base_url,
        timeout=settings.llm_timeout,
        max_retries=0,  # retries are ours: they honour Retry-After and end as llm_unavailable
    )


def llm_client(
    config: RunConfig,
    settings: RunnerSettings,
    client: AsyncOpenAI,
    before_call: CallGate | None = None,
) -> LlmClient:
    """The run's model calls: its model and sampling, with the runner's retry policy (and its
    budget reservation before each call, `before_call`)."""
    return LlmClient(
        client,
        config.model.name,
        temperature=config.model.temperature,
        max_output_tokens=config.model.max_output_tokens,
        retry=RetryPolicy(
            settings.llm_max_attempts, settings.retry_base_delay, settings.retry_max_delay
        ),
        stream=settings.stream,
        before_call=before_call,
    )


def sandbox_approval(
    loop_ref: list[AgentLoop | None],
) -> Callable[[str, str], Coroutine[Any, Any, bool]]:
    """A sandboxed tool's `nexus.approve(reason)`: the run's own approval request, asked by
    the loop running the tool (it exists before any tool runs)."""

    async def approve(tool: str, reason: str) -> bool:
        loop = loop_ref[0]
        if loop is None:
            return False
        asked = await loop._ask(tool, f"{tool} (sandboxed tool) asks: {reason}", reason)
        return asked[1] == "approved"

    return approve


def spend_gate(  # noqa: PLR0917 - the run's parts a reservation touches
    settings: RunnerSettings,
    bus: Bus,
    control: RunControl,
    pub: RunPublisher,
    loop_ref: list[AgentLoop | None],
    clock: SleepingClock,
) -> CallGate | None:
    """The budget reservation before each of the run's model calls (its turns' and its
    summaries'), over the runner's own connection; None with reservations off."""
    if settings.budget_reservations == "off":
        return None

    def turn() -> int:
        loop = loop_ref[0]
        return loop.usage.turns if loop is not None else 1

    gate = SpendGate(
        bus.nc,
        control,
        pub.event,
        pub.flush,
        prices=settings.prices,
        turn_of=turn,
        retry_seconds=settings.budget_retry_seconds,
        clock=clock,
    )
    return gate.before_call
