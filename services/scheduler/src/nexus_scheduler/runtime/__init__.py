"""Runtimes: where runs execute."""

from nexus_scheduler.runtime.base import (
    AgentRuntime,
    AgentRuntimeError,
    RunHandle,
    RuntimeState,
    RuntimeStatus,
)

__all__ = ["AgentRuntime", "AgentRuntimeError", "RunHandle", "RuntimeState", "RuntimeStatus"]
