"""Print the configuration reference (every NEXUS_* variable of each service) as markdown.

    uv run python -m scripts.config_reference

Generated from the pydantic-settings classes, so it says what the code reads.
"""

from __future__ import annotations

import json
from typing import Any

from nexus_events.runtime.services import SERVICES
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

# (title, module, class) of each table: the settings every service shares, then each
# service's own, from the service table (nexus_events.runtime.services).
SECTIONS: list[tuple[str, str, str]] = [
    ("every service: NATS", "nexus_events.transport.connect", "BusSettings"),
    (
        "streams: core's settings win (`ensure_streams`; others only create missing streams)",
        "nexus_events.contract.streams",
        "StreamSettings",
    ),
    ("every service: metrics", "nexus_events.runtime.metrics", "MetricsSettings"),
    *(
        (
            f"{spec.name} (`python -m {spec.module}`)" if i == 0 else f"{spec.name}: `{name}`",
            module,
            name,
        )
        for spec in SERVICES
        for i, (module, name) in enumerate(path.split(":") for path in spec.settings)
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
    """The fields `cls` reads: a subclass's table leaves out what a parent's own table lists
    (fields from a base without a table, e.g. `ServiceSettings`, are listed in each)."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    rows = ["| variable | default | what |", "|---|---|---|"]
    tabled = {(module, name) for _, module, name in SECTIONS}
    inherited = {
        n
        for base in cls.__mro__[1:]
        if (base.__module__, base.__qualname__) in tabled
        for n in getattr(base, "model_fields", {})
    }
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
