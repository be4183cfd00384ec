"""Print the configuration reference (every NEXUS_* variable of each service) as markdown.

    uv run python -m scripts.config_reference

Generated from the pydantic-settings classes, so it says what the code reads.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

SECTIONS: list[tuple[str, str, str]] = [
    ("every service: NATS", "nexus_events.connect", "BusSettings"),
    (
        "streams: core's settings win (`ensure_streams`; others only create missing streams)",
        "nexus_events.streams",
        "StreamSettings",
    ),
    ("every service: metrics", "nexus_events.metrics", "MetricsSettings"),
    ("core (`python -m nexus_core`)", "nexus_core.config", "CoreSettings"),
    ("core: the system's run metrics", "nexus_core.run_metrics", "RunMetricsSettings"),
    ("scheduler (`python -m nexus_scheduler`)", "nexus_scheduler.config", "SchedulerSettings"),
    ("runner (`python -m nexus_runner`)", "nexus_runner.config", "RunnerSettings"),
    ("memory (`python -m nexus_memory`)", "nexus_memory.config", "MemorySettings"),
    ("plane-sync (`python -m nexus_plane_sync`)", "nexus_plane_sync.config", "PlaneSyncSettings"),
    (
        "channel gateway (`python -m nexus_channel_gateway`)",
        "nexus_channel_gateway.config",
        "GatewaySettings",
    ),
]


def _default(field: Any) -> str:
    if getattr(field.default_factory, "__name__", "") == "gethostname":
        return "the host name"
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, dict) and value and all(isinstance(v, BaseModel) for v in value.values()):
        return "(see code)"
    if value is None:
        return "unset"
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return f"`{text}`" if len(text) < 60 else "(see code)"


def table(cls: type[BaseSettings]) -> str:
    """The fields `cls` adds: a subclass's table leaves out what its parent's table lists."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    rows = ["| variable | default | what |", "|---|---|---|"]
    inherited = {n for base in cls.__mro__[1:] for n in getattr(base, "model_fields", {})}
    for name, field in cls.model_fields.items():
        if name in inherited:
            continue
        what = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{prefix}{name.upper()}` | {_default(field)} | {what} |")
    return "\n".join(rows)


def main() -> None:
    import importlib

    for title, module, name in SECTIONS:
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        print(f"#### {title}\n\n{table(cls)}\n")


if __name__ == "__main__":
    main()
