"""`nexus pair`'s fold of the pairing events, and when `nexus dev up` starts the gateway."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded, decode, encode
from nexus_events.events import PairingApproved, PairingRequested, PairingRevoked
from nexus_events.events.base import Event

from nexus_cli.commands.pair import fold
from nexus_cli.devstack.services import GATEWAY
from nexus_cli.devstack.supervisor import gateway_port

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def _decoded(channel: str, event: Event, seq: int) -> Decoded:
    enc = encode(subjects.channel_event(channel, event.event_name), event, source="t")
    d = decode(enc.subject, enc.body, enc.headers)
    return Decoded(d.event, dataclasses.replace(d.envelope, stream_seq=seq), d.address)


def test_fold_follows_requests_approvals_revocations_and_expiry() -> None:
    later = NOW + timedelta(minutes=30)
    events = [
        _decoded("slack", PairingRequested(user="U1", code="AAAAAA", expires_at=later), 1),
        _decoded("slack", PairingRequested(user="U2", code="BBBBBB", expires_at=NOW), 2),
        _decoded("telegram", PairingRequested(user="7", code="CCCCCC", expires_at=later), 3),
        _decoded("slack", PairingApproved(user="U1", code="AAAAAA"), 4),
        _decoded("telegram", PairingApproved(user="7", code="CCCCCC"), 5),
        _decoded("telegram", PairingRevoked(user="7"), 6),
        # A new challenge of an approved sender does not undo the approval.
        _decoded("slack", PairingRequested(user="U1", code="DDDDDD", expires_at=later), 7),
    ]
    book = fold(events)
    status = {key: p.current_status(NOW) for key, p in book.items()}
    assert status == {
        ("slack", "U1"): "approved",
        ("slack", "U2"): "expired",
        ("telegram", "7"): "revoked",
    }


def test_dev_stack_always_starts_the_gateway_and_gives_it_8091_only_with_a_channel() -> None:
    # Delegation runs in the gateway: a plain stack (no channel at all) needs it too.
    assert GATEWAY.enabled({})
    assert gateway_port({}) == "0"
    assert gateway_port({"NEXUS_SLACK_BOT_TOKEN": ""}) == "0"
    assert gateway_port({"NEXUS_SLACK_BOT_TOKEN": "xoxb-1"}) == "8091"
    assert gateway_port({"NEXUS_TELEGRAM_BOT_TOKEN": "1:a"}) == "8091"
    assert gateway_port({"NEXUS_WEBHOOK_SOURCES_FILE": "/etc/nexus/hooks.yaml"}) == "8091"
    assert gateway_port({"NEXUS_GATEWAY_PORT": "9000"}) == "9000"
