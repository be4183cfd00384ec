"""`nexus pair`'s fold of the pairing events, and when `nexus dev up` starts the gateway."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from nexus_events import subjects
from nexus_events.codec import Decoded, decode, encode
from nexus_events.events import PairingApproved, PairingRequested, PairingRevoked
from nexus_events.events.base import Event

from nexus_cli.commands.pair import fold
from nexus_cli.devstack.supervisor import gateway_configured

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


def test_dev_stack_starts_the_gateway_only_when_a_channel_is_configured() -> None:
    assert not gateway_configured({})
    assert not gateway_configured({"NEXUS_SLACK_BOT_TOKEN": ""})
    assert gateway_configured({"NEXUS_SLACK_BOT_TOKEN": "xoxb-1"})
    assert gateway_configured({"NEXUS_TELEGRAM_BOT_TOKEN": "1:a"})
    assert gateway_configured({"NEXUS_WEBHOOK_SOURCES_FILE": "/etc/nexus/hooks.yaml"})
