"""The Nexus event contract: subjects, streams, event models, codec, bus, projections.

Import the areas as modules (``from nexus_events import subjects``) or the common names
from here.
"""

import importlib as _importlib
import typing as _typing

from nexus_events.contract.codec import Decoded, Envelope, decode, encode
from nexus_events.contract.runstate import RunStatus, next_status
from nexus_events.contract.streams import StreamSettings, ensure_streams
from nexus_events.errors import (
    BusError,
    BusUnavailable,
    ContractError,
    DecodeError,
    DocumentInvalid,
    HealthUnavailable,
    InvalidEvent,
    InvalidSubject,
    JetStreamUnavailable,
    NexusError,
    NoQuorum,
    ProjectionError,
    PublishFailed,
    PublishRejected,
    PullStalled,
    StreamDrift,
    UndecodableMessage,
    UnknownEvent,
    UnregisteredEvent,
)
from nexus_events.events.base import Command, Event
from nexus_events.transport.bus import Bus, BusSettings, Consumer, ConsumerSpec, Delivery, Outgoing

if _typing.TYPE_CHECKING:
    from nexus_events.transport.projection import Projection, ProjectionRunner, Source, rebuild

# Names whose module needs an extra (projection: asyncpg, ``nexus-events[postgres]``) are
# imported on first use, so a package installed without it (the runner) imports this one.
_LAZY = dict.fromkeys(
    ("Projection", "ProjectionRunner", "Source", "rebuild"), "nexus_events.transport.projection"
)


def __getattr__(name: str) -> object:
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nexus_events' has no attribute {name!r}")


__all__ = [
    "Bus",
    "BusError",
    "BusSettings",
    "BusUnavailable",
    "Command",
    "Consumer",
    "ConsumerSpec",
    "ContractError",
    "DecodeError",
    "Decoded",
    "Delivery",
    "DocumentInvalid",
    "Envelope",
    "Event",
    "HealthUnavailable",
    "InvalidEvent",
    "InvalidSubject",
    "JetStreamUnavailable",
    "NexusError",
    "NoQuorum",
    "Outgoing",
    "Projection",
    "ProjectionError",
    "ProjectionRunner",
    "PublishFailed",
    "PublishRejected",
    "PullStalled",
    "RunStatus",
    "Source",
    "StreamDrift",
    "StreamSettings",
    "UndecodableMessage",
    "UnknownEvent",
    "UnregisteredEvent",
    "decode",
    "encode",
    "ensure_streams",
    "next_status",
    "rebuild",
]
