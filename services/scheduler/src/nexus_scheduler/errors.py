"""Errors of the scheduler.

SchedulerError
├── AgentRuntimeError        a runtime could not start or stop a run
└── ConfigError          settings that cannot work together
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Root of the scheduler's errors."""


class ConfigError(SchedulerError, ValueError):
    """Settings that cannot work together."""
