"""Structured logs: one JSON object per line, with the service, the run and the trace.

`setup_logging(service)` installs it on the root logger. Each line carries ``time``,
``level``, ``service``, ``logger``, ``message``, the ``trace_id``/``span_id`` of the span
current when the line was logged (so a log line leads to its trace in Tempo), any fields
bound with `bind` (the runner binds ``run_id`` for its whole process), the ``extra=`` fields
of the call (``run_id``, ``stream_seq``, ...), and ``exception`` with the traceback.

``NEXUS_LOG_FORMAT=text`` gives the classic one-line text instead (the dev stack uses it for
people reading `nexus dev logs`); ``NEXUS_LOG_LEVEL`` sets the level (default INFO).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from opentelemetry import trace

FORMAT_ENV = "NEXUS_LOG_FORMAT"
LEVEL_ENV = "NEXUS_LOG_LEVEL"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

# Replaced, never mutated (`bind` sets a new mapping), so an immutable empty default is safe.
_bound: ContextVar[Mapping[str, Any]] = ContextVar("nexus_log_fields", default=MappingProxyType({}))
# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def bind(**fields: Any) -> None:
    """Add `fields` to every line logged from this context on (and tasks started from it)."""
    _bound.set({**_bound.get(), **fields})


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object (see the module docstring for the fields)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            line["trace_id"] = format(ctx.trace_id, "032x")
            line["span_id"] = format(ctx.span_id, "016x")
        line.update(_bound.get())
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def setup_logging(service: str, env: Mapping[str, str] | None = None) -> None:
    """Log to stderr as JSON lines (or text, per ``NEXUS_LOG_FORMAT``) at ``NEXUS_LOG_LEVEL``."""
    env = os.environ if env is None else env
    handler = logging.StreamHandler()
    if env.get(FORMAT_ENV, "json").strip().lower() == "text":
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    else:
        handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(env.get(LEVEL_ENV, "INFO").strip().upper() or "INFO")


__all__ = ["FORMAT_ENV", "LEVEL_ENV", "JsonFormatter", "bind", "setup_logging"]
