"""The event base classes and the one registry from (family, event name) to model.

Wire names are declared, never derived from module paths: each concrete event sets
``family`` and ``name`` as class variables and is registered once at import; registering the
same (family, name) twice fails at import time.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict

from nexus_events.contract.subjects import Family, schema_prefix
from nexus_events.errors import UnregisteredEvent

SCHEMA_VERSION = 1


class Event(BaseModel):
    """A fact that happened. Frozen; unknown fields are ignored so services deploy independently."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    event_family: ClassVar[Family]
    event_name: ClassVar[str]
    schema_version: ClassVar[int] = SCHEMA_VERSION

    @classmethod
    def schema_name(cls) -> str:
        """The ``Nexus-Schema`` header value, e.g. ``nexus.agent.run.completed/1``."""
        return f"{schema_prefix(cls.event_family)}.{cls.event_name}/{cls.schema_version}"


class Command(Event):
    """A request a person may type (CLI, HTTP, bare ``nats pub``): unknown fields are errors,
    so a misspelt field is reported instead of silently ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")


E = TypeVar("E", bound=type[Event])

_REGISTRY: dict[tuple[Family, str], type[Event]] = {}


def register(cls: E) -> E:
    """Class decorator: add an event model to the registry under (family, name)."""
    key = (cls.event_family, cls.event_name)
    existing = _REGISTRY.get(key)
    if existing is not None and existing is not cls:
        raise TypeError(f"event {key} registered twice: {existing.__name__} and {cls.__name__}")
    _REGISTRY[key] = cls
    return cls


def lookup(family: Family, name: str) -> type[Event]:
    """The model registered for (family, name); raise `UnregisteredEvent` if none."""
    try:
        return _REGISTRY[(family, name)]
    except KeyError:
        raise UnregisteredEvent(f"no {family} event named {name!r}") from None


def registered() -> dict[tuple[Family, str], type[Event]]:
    """A copy of the whole registry (for schema snapshots and docs)."""
    return dict(_REGISTRY)


def describe(model: type[Event]) -> dict[str, Any]:
    """JSON Schema of one event model, as committed in the contract snapshot."""
    return model.model_json_schema()
