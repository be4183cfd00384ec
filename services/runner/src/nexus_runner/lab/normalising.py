"""What a replay's comparison ignores: the run ids, times, workspace paths and work branches
that differ between a run and its replay by construction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

RUN = "<run>"
TIME = "<time>"
WORKSPACE = "<workspace>"

# ISO-8601 date-times (``2026-11-28T10:22:16Z``, ``2026-11-28 10:22:16.123+00:00``).
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
)


@dataclass(frozen=True)
class Normaliser:
    """Rewrites the text of either run so that equal behaviour reads equal: both run ids
    become ``<run>``, times ``<time>``, the workspace's absolute path ``<workspace>``."""

    run_id: str
    source_run_id: str
    workspace: str  # the replay's workspace root (absolute)

    def text(self, value: str) -> str:
        out = value.replace(self.workspace, WORKSPACE) if self.workspace else value
        for run in (self.run_id, self.source_run_id):
            # The source's workspace sat on another runner, at <root>/<its run id>.
            out = re.sub(rf"(?:/[\w.@+-]+)+/{re.escape(run)}(?![\w-])", WORKSPACE, out)
            out = out.replace(run, RUN)
        return _TIMESTAMP.sub(TIME, out)

    def value(self, value: Any) -> Any:
        """`value` with every string in it normalised (dicts and lists walked)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value


__all__ = ["RUN", "TIME", "WORKSPACE", "Normaliser"]
