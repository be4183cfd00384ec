"""How a service reaches NATS: `BusSettings` (env ``NEXUS_NATS_*``) and `connect()`.

Every way of talking to the bus starts here, so a service's connection (name, credentials,
reconnect and ping policy) is the same whichever client library sits on top of it.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import nats.errors
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from nexus_events.errors import BusUnavailable
from nexus_events.transport.natsclient import Client

log = logging.getLogger(__name__)


class BusSettings(BaseSettings):
    """How to reach NATS. Env: NEXUS_NATS_<FIELD>."""

    model_config = SettingsConfigDict(env_prefix="NEXUS_NATS_", extra="ignore")

    url: str = Field("nats://127.0.0.1:4222", description="Comma-separated server URLs.")
    name: str = Field("nexus", description="Connection name shown by the server.")
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds_file: str | None = Field(None, description="Path of a .creds file (NGS, operator).")
    inbox_prefix: str | None = Field(
        None,
        description="Prefix of the connection's reply subjects (default _INBOX). A run's"
        " credential may only read _INBOX_<run_id>.>"
        " (nexus_events.contract.run_access.inbox_prefix).",
    )
    connect_timeout: float = Field(2.0, gt=0)
    # The first connect also runs this reconnect loop: attempts x wait bounds start-up.
    reconnect_time_wait: float = Field(0.5, gt=0)
    max_reconnect_attempts: int = Field(-1, description="-1 = keep trying forever.")
    connect_attempts: int = Field(10, ge=1, description="Attempts of the very first connect.")
    # A dead TCP connection is noticed after ping_interval x max_outstanding_pings seconds.
    ping_interval: float = Field(10.0, gt=0)
    max_outstanding_pings: int = Field(3, ge=1)
    publish_timeout: float = Field(5.0, gt=0, description="Wait for one ack.")
    publish_deadline: float = Field(
        30.0, gt=0, description="Keep retrying a publish (reconnects) for this long."
    )
    publish_window: int = Field(500, gt=0, description="In-flight acks in publish_many.")


async def _on_error(exc: Exception) -> None:
    log.warning("nats error: %s", exc)


async def _on_disconnect() -> None:
    log.warning("nats disconnected")


async def _on_reconnect() -> None:
    log.info("nats reconnected")


def connect_options(settings: BusSettings) -> dict[str, Any]:
    """nats-py ``connect()`` keyword arguments for the first connect (see `connect`)."""
    options: dict[str, Any] = {
        "servers": settings.url.split(","),
        "name": settings.name,
        "connect_timeout": settings.connect_timeout,
        "reconnect_time_wait": settings.reconnect_time_wait,
        "max_reconnect_attempts": settings.connect_attempts,
        "ping_interval": settings.ping_interval,
        "max_outstanding_pings": settings.max_outstanding_pings,
        "error_cb": _on_error,
        "disconnected_cb": _on_disconnect,
        "reconnected_cb": _on_reconnect,
    }
    if settings.user:
        options.update(user=settings.user, password=settings.password)
    if settings.token:
        options["token"] = settings.token
    if settings.creds_file:
        options["user_credentials"] = settings.creds_file
    if settings.inbox_prefix:
        options["inbox_prefix"] = settings.inbox_prefix
    return options


async def connect(settings: BusSettings) -> Client:
    """Connect with reconnects enabled; raise `BusUnavailable` if NATS cannot be reached."""
    nc = Client()
    try:
        await nc.connect(**connect_options(settings))
    except (OSError, nats.errors.Error) as exc:
        # nats-py leaves the socket of a refused connect (bad credentials) open: close it, or
        # every failed attempt of a process that tries again holds a socket until exit.
        await close_quietly(nc)
        raise BusUnavailable(f"cannot connect to NATS at {settings.url}: {exc}") from exc
    # Once connected, reconnect for as long as the settings say (forever by default).
    nc.options["max_reconnect_attempts"] = settings.max_reconnect_attempts
    return nc


async def close_quietly(nc: Client) -> None:
    """Close a client whose connect failed, socket included: nats-py marks a refused connect
    closed without closing its transport, so `close` alone leaves the socket open."""
    with contextlib.suppress(Exception):
        await nc.close()
    transport = getattr(nc, "_transport", None)
    if transport is not None:
        with contextlib.suppress(Exception):
            transport.close()


__all__ = ["BusSettings", "close_quietly", "connect", "connect_options"]
