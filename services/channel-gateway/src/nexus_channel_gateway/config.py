"""The gateway's settings, from the environment (prefix ``NEXUS_``; NATS: ``NEXUS_NATS_*``).

A channel is on when its credentials are set: Slack needs the bot token and the signing
secret, Telegram the bot token and the webhook secret token, generic webhooks a YAML file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Self

from nexus_events.contract.approver_policy import ApproverDefaultFields
from nexus_events.contract.subjects import validate_token
from nexus_events.errors import InvalidSubject
from nexus_events.events import ChannelAddress
from nexus_events.runtime.settings import (
    ConsumerPrefix,
    HealthPortSetting,
    PoolSize,
    ServiceSettings,
)
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

# Channels that can post (the approver chats must be on one of them).
POSTING_CHANNELS = ("slack", "telegram")


def parse_approvers(value: object) -> object:
    """``slack:C0123,telegram:-1001`` -> addresses; each entry is CHANNEL:CONVERSATION."""
    if not isinstance(value, str):
        return value
    approvers = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        channel, sep, conversation = entry.partition(":")
        if not sep or not channel.strip() or not conversation.strip():
            raise ValueError(f"{entry!r} is not CHANNEL:CONVERSATION (e.g. slack:C0123)")
        try:
            validate_token(channel.strip(), "channel")
        except InvalidSubject as exc:
            raise ValueError(str(exc)) from None
        approvers.append({"channel": channel.strip(), "conversation": conversation.strip()})
    return approvers


class GatewaySettings(ServiceSettings, ApproverDefaultFields):
    health_port: HealthPortSetting = 8085
    consumer_prefix: ConsumerPrefix = "channel_gateway"
    db_pool_size: PoolSize = 6

    # -- HTTP ingress ------------------------------------------------------------------------
    gateway_host: str = Field("127.0.0.1", description="Bind address of the webhook ingress.")
    # 8091, not 8090: plane-sync's webhook port defaults to 8090 and both may share a host.
    gateway_port: int = Field(8091, ge=0, le=65535, description="Port (0: any free port).")
    gateway_max_body: int = Field(
        1_000_000, gt=0, description="Largest accepted request body in bytes (else 413)."
    )
    # -- Slack -----------------------------------------------------------------------------------
    slack_bot_token: SecretStr | None = Field(None, description="Bot token (xoxb-...).")
    slack_signing_secret: SecretStr | None = Field(None, description="Events API signing secret.")
    slack_base_url: str = Field("https://slack.com/api/", description="Web API base URL.")
    # -- Telegram ------------------------------------------------------------------------------
    telegram_bot_token: SecretStr | None = Field(None, description="Bot API token.")
    telegram_secret_token: SecretStr | None = Field(
        None, description="secret_token given to setWebhook; checked on every update."
    )
    telegram_base_url: str = Field(
        "https://api.telegram.org/bot", description="Bot API base URL (token appended)."
    )
    # -- generic webhooks ----------------------------------------------------------------------
    webhook_sources_file: Path | None = Field(
        None, description="YAML file of generic webhook sources (docs/channels.md)."
    )
    # -- behaviour -------------------------------------------------------------------------------
    pairing_ttl: float = Field(3600.0, gt=0, description="Seconds a pairing code stays valid.")
    pairing_max_pending: int = Field(
        20, gt=0, description="Most pending pairing codes per channel (more are refused)."
    )
    gateway_open_channels: list[str] = Field(
        default_factory=list,
        description="Channels whose senders need no pairing (e.g. an internal webhook).",
    )
    channel_approvers: Annotated[list[ChannelAddress], NoDecode] = Field(
        default_factory=list,
        description="Chats every approval request is also posted to and answerable from"
        " (any run, not only chat-started ones): CHANNEL:CONVERSATION, comma-separated,"
        " e.g. `slack:C0123,telegram:-1001`.",
    )
    delegation_max_depth: int = Field(
        3, ge=1, le=20, description="Longest chain of delegated runs below a root run."
    )
    conversation_idle_seconds: float = Field(
        86_400.0,
        gt=0,
        description="A chat conversation with no message and no run going for this long ends,"
        " told [abandoned] once (docs/channels.md).",
    )
    conversation_sweep_seconds: float = Field(
        60.0, gt=0, description="How often idle conversations are looked for."
    )
    # -- service ---------------------------------------------------------------------------------
    ack_wait: float = Field(
        30.0, gt=0, description="Seconds before a message a dead gateway held is redelivered."
    )
    jetstream_probe_seconds: float = Field(
        2.0,
        gt=0,
        description="Readiness checks this often that JetStream has a leader for the streams"
        " the gateway reads and writes (not ready through an election).",
    )

    @field_validator(
        "slack_bot_token",
        "slack_signing_secret",
        "telegram_bot_token",
        "telegram_secret_token",
        "webhook_sources_file",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # compose passes `${NEXUS_SLACK_BOT_TOKEN:-}`: an empty value means the channel is off.
        return None if value == "" else value

    @field_validator("channel_approvers", mode="before")
    @classmethod
    def _approvers(cls, value: object) -> object:
        return parse_approvers(value)

    @model_validator(mode="after")
    def _approvers_can_post(self) -> Self:
        enabled = {"slack": self.slack_enabled, "telegram": self.telegram_enabled}
        for a in self.channel_approvers:
            if a.channel not in POSTING_CHANNELS:
                raise ValueError(
                    f"approver {a.channel}:{a.conversation}: only {' and '.join(POSTING_CHANNELS)}"
                    " can post approvals"
                )
            if not enabled[a.channel]:
                raise ValueError(
                    f"approver {a.channel}:{a.conversation}: {a.channel} is not configured"
                )
        return self

    @property
    def slack_enabled(self) -> bool:
        return self.slack_bot_token is not None and self.slack_signing_secret is not None

    @property
    def telegram_enabled(self) -> bool:
        return self.telegram_bot_token is not None and self.telegram_secret_token is not None
