"""The runner's errors, under the contract's `NexusError` root.

NexusError
  RunnerError
    ToolError            a tool call failed; the model reads the message
      PathEscape         a path outside the workspace
    LlmUnavailable       the model kept failing after all retries
    RunStopped           the run must end now (budget, stuck, cancel); carries the reason
"""

from __future__ import annotations

from typing import Any

from nexus_events.contract.runstate import RunStatus
from nexus_events.errors import NexusError


class RunnerError(NexusError):
    """Base of the runner's errors."""


class ToolError(RunnerError):
    """A tool call failed in a way the model can read and react to."""


class PathEscape(ToolError):  # noqa: N818 - reads as a fact, like httpx errors
    """A path resolves outside the workspace (``..``, absolute, or a symlink escape)."""


class LlmUnavailable(RunnerError):  # noqa: N818
    """The model server kept failing (429/5xx/timeouts) after every retry."""


class RunStopped(RunnerError):  # noqa: N818
    """The run ends now with `status` (failed or cancelled) and reason code `reason`."""

    def __init__(
        self,
        status: RunStatus,
        reason: str,
        message: str,
        detail: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.detail = detail or {}
