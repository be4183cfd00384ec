"""The error tree of the Nexus contract library.

    NexusError
    ├── ContractError            a value breaks the contract before anything is sent
    │   ├── InvalidSubject       a subject or subject token is malformed (wildcards, dots, ...)
    │   ├── UnregisteredEvent    an event class or name has no registry entry
    │   └── DocumentInvalid      an agent/skill document fails validation (field by field)
    ├── DecodeError              an inbound message cannot become an event (goes to the DLQ)
    │   ├── UndecodableMessage   the body is not UTF-8 JSON
    │   ├── UnknownEvent         the subject names no known event
    │   └── InvalidEvent         the JSON does not match the event's model
    ├── BusError                 talking to NATS JetStream failed
    │   ├── BusUnavailable       not connected / connection lost (also a ConnectionError)
    │   │   └── JetStreamUnavailable  connected, but JetStream's cluster has no meta leader
    │   ├── PublishFailed        the server did not acknowledge a publish
    │   │   ├── PublishRejected  the message itself was refused (too large, denied): never retry
    │   │   └── NoQuorum         a JetStream cluster cannot store now (no stream or meta leader)
    │   ├── PullStalled          a pull consumer refused or lost a pull request
    │   └── StreamDrift          a stream's live config differs and cannot be updated
    ├── ProjectionError          a projection cannot apply or rebuild
    └── HealthUnavailable        the health endpoint cannot listen (also an OSError)

Every `DecodeError` carries a short machine `reason` (``undecodable``, ``unknown_event``,
``invalid_event``, ``invalid_subject``) used as the dead-letter reason code.
"""

from __future__ import annotations

from dataclasses import dataclass


class NexusError(Exception):
    """Root of every error raised by nexus_events."""


class ContractError(NexusError, ValueError):
    """A value does not satisfy the contract; nothing was sent."""


class InvalidSubject(ContractError):  # noqa: N818 - reads as a fact, like httpx errors
    """A subject or one of its tokens is malformed."""


class UnregisteredEvent(ContractError):  # noqa: N818
    """An event class or (family, name) pair has no registry entry."""


@dataclass(frozen=True)
class FieldError:
    """One problem in a document: where (dotted path, ``(document)`` for the whole) and what."""

    loc: str
    msg: str

    def __str__(self) -> str:
        return f"{self.loc}: {self.msg}"


class DocumentInvalid(ContractError):  # noqa: N818 - reads as a fact
    """A catalog document does not validate; `errors` lists every bad field. Nothing is sent."""

    def __init__(self, kind: str, errors: list[FieldError]) -> None:
        self.kind = kind
        self.errors = errors
        super().__init__(f"invalid {kind}: " + "; ".join(str(e) for e in errors))


class DecodeError(NexusError):
    """An inbound message cannot be turned into an event."""

    reason = "undecodable"

    def __init__(self, message: str, *, subject: str | None = None) -> None:
        super().__init__(message)
        self.subject = subject


class UndecodableMessage(DecodeError):  # noqa: N818
    """The body is not UTF-8 JSON (or not a JSON object)."""

    reason = "undecodable"


class UnknownEvent(DecodeError):  # noqa: N818
    """The subject does not name an event the contract knows."""

    reason = "unknown_event"


class InvalidEvent(DecodeError):  # noqa: N818
    """The body is JSON but does not validate against the event's model."""

    reason = "invalid_event"


class BusError(NexusError):
    """An operation against NATS JetStream failed."""


class BusUnavailable(BusError, ConnectionError):  # noqa: N818
    """Not connected to NATS, or the connection was lost."""


class JetStreamUnavailable(BusUnavailable):
    """Connected, but JetStream cannot serve the request: its cluster has no meta leader (an
    election under way, or too few nodes reachable for a quorum). Retry later."""


class PublishFailed(BusError):  # noqa: N818
    """JetStream did not acknowledge a publish (no stream, timeout, or server error)."""


class PublishRejected(PublishFailed):
    """The message itself was refused (over max_payload, no permission, bad header): publishing
    the same message again cannot succeed, so callers must not retry it."""


class NoQuorum(PublishFailed):
    """A JetStream cluster cannot store in `stream` now: the stream (or the cluster's meta
    group) has no leader because too few of its nodes are reachable. A message that got no
    ack may still be stored once quorum is back (it may have reached the log before the
    leader stepped down); publishing it again with the same ``Nats-Msg-Id`` stores it once."""

    def __init__(self, message: str, *, stream: str | None = None) -> None:
        super().__init__(message)
        self.stream = stream


class PullStalled(BusError):  # noqa: N818
    """A pull consumer stopped answering: deleted, refused the request, or the request was lost."""


class StreamDrift(BusError):  # noqa: N818
    """A stream's live configuration differs from the contract and could not be updated."""


class ProjectionError(NexusError):
    """A projection could not apply events or rebuild."""


class HealthUnavailable(NexusError, OSError):  # noqa: N818
    """The health endpoint cannot listen on its address (in use, not permitted, no such host)."""
