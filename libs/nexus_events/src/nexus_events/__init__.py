"""The Nexus event contract: subjects, streams, event models, codec, bus, projections.

Import the areas as modules (``from nexus_events import subjects``) or the common names
from here.
"""

import importlib as _importlib
import typing as _typing

from nexus_events.contract.runstate import RunStatus, next_status
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

if _typing.TYPE_CHECKING:
    from nexus_events.contract.codec import Decoded, Envelope, decode, encode
    from nexus_events.contract.streams import StreamSettings, ensure_streams
    from nexus_events.events.base import Command, Event
    from nexus_events.transport.bus import (
        Bus,
        BusSettings,
        Consumer,
        ConsumerSpec,
        Delivery,
        Outgoing,
    )
    from nexus_events.transport.projection import Projection, ProjectionRunner, Source, rebuild

# Names from the transport (nats), the event models and the codec are imported on first use:
# importing a submodule (``nexus_events.events``, ``nexus_events.errors``) runs this module
# first, and that must not load nats, aiohttp and every event model (a CLI's start, issue 41).
# The projection's names also need an extra (asyncpg, ``nexus-events[postgres]``).
_LAZY = {
    **dict.fromkeys(("Decoded", "Envelope", "decode", "encode"), "nexus_events.contract.codec"),
    **dict.fromkeys(("StreamSettings", "ensure_streams"), "nexus_events.contract.streams"),
    **dict.fromkeys(("Command", "Event"), "nexus_events.events.base"),
    **dict.fromkeys(
        ("Bus", "BusSettings", "Consumer", "ConsumerSpec", "Delivery", "Outgoing"),
        "nexus_events.transport.bus",
    ),
    **dict.fromkeys(
        ("Projection", "ProjectionRunner", "Source", "rebuild"),
        "nexus_events.transport.projection",
    ),
}


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
