"""The Nexus event contract: subjects, streams, event models, codec, bus, projections.

Import the areas as modules (``from nexus_events import subjects``) or the common names
from here.
"""

from nexus_events.bus import Bus, BusSettings, Consumer, ConsumerSpec, Delivery, Outgoing
from nexus_events.codec import Decoded, Envelope, decode, encode
from nexus_events.errors import (
    BusError,
    BusUnavailable,
    ContractError,
    DecodeError,
    DocumentInvalid,
    HealthUnavailable,
    InvalidEvent,
    InvalidSubject,
    NexusError,
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
from nexus_events.projection import Projection, ProjectionRunner, Source, rebuild
from nexus_events.runstate import RunStatus, next_status
from nexus_events.streams import StreamSettings, ensure_streams

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
    "NexusError",
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
