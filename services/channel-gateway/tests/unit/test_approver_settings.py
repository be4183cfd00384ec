"""NEXUS_CHANNEL_APPROVERS: parsed from CHANNEL:CONVERSATION entries; a bad one is a one-line
error naming the variable."""

from __future__ import annotations

import pytest
from nexus_events.runtime.process import settings_error
from pydantic import ValidationError

from nexus_channel_gateway.config import GatewaySettings

ON = {
    "slack_bot_token": "xoxb-1",
    "slack_signing_secret": "s",
    "telegram_bot_token": "1:a",
    "telegram_secret_token": "t",
}


def test_approvers_are_read_from_a_comma_separated_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NEXUS_CHANNEL_APPROVERS", " slack:C0123 ,telegram:-1001,")
    approvers = GatewaySettings(**ON).channel_approvers
    assert [(a.channel, a.conversation, a.thread) for a in approvers] == [
        ("slack", "C0123", None),
        ("telegram", "-1001", None),
    ]


@pytest.mark.parametrize(
    ("value", "settings", "error"),
    [
        ("slack", ON, "'slack' is not CHANNEL:CONVERSATION"),
        ("slack:", ON, "'slack:' is not CHANNEL:CONVERSATION"),
        ("sl ack:C1", ON, "invalid channel 'sl ack'"),
        ("github:C1", ON, "approver github:C1: only slack and telegram can post approvals"),
        ("telegram:5", {"slack_bot_token": "x", "slack_signing_secret": "s"}, "not configured"),
    ],
)
def test_a_bad_approver_is_a_one_line_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, settings: dict[str, str], error: str
) -> None:
    monkeypatch.setenv("NEXUS_CHANNEL_APPROVERS", value)
    with pytest.raises(ValidationError) as caught:
        GatewaySettings(**settings)
    line = settings_error(caught.value)
    assert "\n" not in line
    assert error in line
    if "CHANNEL:CONVERSATION" in error or "invalid channel" in error:
        assert line.startswith("NEXUS_CHANNEL_APPROVERS: ")
