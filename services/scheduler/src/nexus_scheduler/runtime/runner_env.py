"""The environment a local runner starts with: built from scratch, nothing inherited.

Whatever started the stack (a shell with cloud keys, tokens of other services, an SSH agent)
stays out of the runner: from the scheduler's environment only the variables the runner
itself reads are passed (its settings, the bus's, logging and OpenTelemetry), plus the ones
an operator names (``NEXUS_LOCAL_PASS_ENV``). ``HOME`` is a directory of the run's own, so
the operator's ``~/.ssh``, ``~/.gitconfig`` and caches are not the run's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

# Exact names passed through: the locale, the search path, and the runner's settings
# (nexus_runner.config.RunnerSettings, NEXUS_<FIELD>) that have no prefix of their own below.
PASSED_NAMES = frozenset(
    {
        "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
        "NEXUS_WORKSPACE_ROOT", "NEXUS_STREAM", "NEXUS_PRICES", "NEXUS_HEARTBEAT_INTERVAL",
        "NEXUS_APPROVAL_TIMEOUT", "NEXUS_SHELL_TIMEOUT", "NEXUS_OUTPUT_CAP",
        "NEXUS_EVENT_OUTPUT_CAP", "NEXUS_LOG_CHUNK_CHARS", "NEXUS_REMEMBER_TIMEOUT",
        "NEXUS_SCHEDULES_TIMEOUT", "NEXUS_OUTPUT_RETRIES",
    }
)  # fmt: skip
# Prefixes passed through: the bus (NEXUS_NATS_*), the model, the runner's other settings
# (by group, and under their deprecated NEXUS_RUNNER_ prefix), logging and tracing, and the
# stream settings (the checkpoint bucket's retention and replicas follow the transcripts').
PASSED_PREFIXES = (
    "NEXUS_NATS_", "NEXUS_LLM_", "NEXUS_RETRY_", "NEXUS_STUCK_", "NEXUS_MCP_", "NEXUS_GIT_",
    "NEXUS_GITHUB_", "NEXUS_ACCEPTANCE_", "NEXUS_RUNNER_", "NEXUS_LOG_", "NEXUS_OTEL_",
    "OTEL_", "NEXUS_CONTEXT_", "NEXUS_STREAMS_", "NEXUS_TOOL_SANDBOX", "NEXUS_SANDBOX_",
    "NEXUS_BUDGET_",
)  # fmt: skip
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def passes(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether the variable `name` goes from the scheduler's environment to a runner."""
    return name in PASSED_NAMES or name.startswith(PASSED_PREFIXES) or name in set(extra)


def runner_env(
    parent: Mapping[str, str],
    home: Path,
    *,
    extra_names: Iterable[str] = (),
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The runner's environment: the passed variables of `parent`, ``HOME`` = `home` (made,
    mode 0700), then `overrides` (the runtime's own: run id, trace context, ...)."""
    names = set(extra_names)
    env = {k: v for k, v in parent.items() if passes(k, names)}
    env.setdefault("PATH", DEFAULT_PATH)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env.update(overrides or {})
    return env
