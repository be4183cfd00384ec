"""The public surface is `nexus_events.__all__`; this test guards it (HX test_exported_members)."""

from __future__ import annotations

import inspect
import types

import nexus_events
from nexus_events import errors

# Removing a name breaks callers; adding one is a decision. Either way, change this list.
EXPECTED = {
    "Bus", "BusError", "BusSettings", "BusUnavailable", "Command", "Consumer", "ConsumerSpec",
    "ContractError", "DecodeError", "Decoded", "Delivery", "DocumentInvalid", "Envelope", "Event",
    "HealthUnavailable", "InvalidEvent", "InvalidSubject", "JetStreamUnavailable", "NexusError",
    "NoQuorum", "Outgoing", "Projection", "ProjectionError", "ProjectionRunner", "PublishFailed",
    "PublishRejected", "PullStalled", "RunStatus", "Source", "StreamDrift",
    "StreamSettings", "UndecodableMessage", "UnknownEvent", "UnregisteredEvent", "decode", "encode",
    "ensure_streams", "next_status", "rebuild",
}  # fmt: skip


def test_export_list_is_the_agreed_one():
    assert len(nexus_events.__all__) == len(set(nexus_events.__all__))
    assert set(nexus_events.__all__) == EXPECTED


def test_every_public_attribute_is_exported():
    public = {
        name
        for name, value in vars(nexus_events).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    # Those whose module needs an extra are there once used (nexus_events.__getattr__).
    assert public | set(nexus_events._LAZY) == set(nexus_events.__all__)


def test_exports_resolve_to_their_home_objects():
    for name in nexus_events.__all__:
        obj = getattr(nexus_events, name)
        home = inspect.getmodule(obj)
        assert home is not None, name
        assert home.__name__.startswith("nexus_events."), (name, home.__name__)
        assert getattr(home, name) is obj, name


def test_star_import_gives_exactly_all():
    namespace: dict[str, object] = {}
    exec("from nexus_events import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(nexus_events.__all__)


def test_every_error_class_is_exported():
    error_classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.NexusError)
    }
    assert error_classes <= set(nexus_events.__all__)
