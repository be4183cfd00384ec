"""The gateway's settings, from the environment (prefix ``NEXUS_``; NATS: ``NEXUS_NATS_*``).

A channel is on when its credentials are set: Slack needs the bot token and the signing
secret, Telegram the bot token and the webhook secret token, generic webhooks a YAML file.
"""

from __future__ import annotations

from pathlib import Path

from nexus_events.health import HealthPort
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NEXUS_", extra="ignore")

    database_url: str = Field(
        "postgresql://postgres@127.0.0.1:5432/nexus", description="PostgreSQL DSN (asyncpg)."
    )
    db_pool_size: int = Field(6, gt=1, description="Most PostgreSQL connections.")
    # -- HTTP ingress ------------------------------------------------------------------------
    gateway_host: str = Field("127.0.0.1", description="Bind address of the webhook ingress.")
    gateway_port: int = Field(8090, ge=0, le=65535, description="Port (0: any free port).")
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
    delegation_max_depth: int = Field(
        3, ge=1, le=20, description="Longest chain of delegated runs below a root run."
    )
    # -- service ---------------------------------------------------------------------------------
    fetch_timeout: float = Field(1.0, gt=0, le=30, description="Seconds one fetch waits.")
    ack_wait: float = Field(
        30.0, gt=0, description="Seconds before a message a dead gateway held is redelivered."
    )
    health_host: str = Field("127.0.0.1", description="Bind address of the health endpoint.")
    health_port: HealthPort = Field(
        8085, ge=0, le=65535, description="Port of /healthz and /readyz (0: any; off: none)."
    )
    drain_timeout: float = Field(30.0, gt=0, description="Most seconds to drain on SIGTERM.")
    consumer_prefix: str = Field(
        "channel_gateway", pattern=r"^[A-Za-z0-9_-]+$", description="Durable consumer prefix."
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

    @property
    def slack_enabled(self) -> bool:
        return self.slack_bot_token is not None and self.slack_signing_secret is not None

    @property
    def telegram_enabled(self) -> bool:
        return self.telegram_bot_token is not None and self.telegram_secret_token is not None
