"""Console settings (env prefix NEXUS_; NATS settings come from NEXUS_NATS_)."""

from __future__ import annotations

from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Annotated, Literal

from nexus_events.runtime.settings import ConsumerPrefix, HealthPortSetting, ServiceSettings
from pydantic import BeforeValidator, Field, SecretStr
from pydantic_settings import NoDecode

Network = IPv4Network | IPv6Network


def _networks(value: object) -> object:
    # From the environment: "10.0.0.0/8, 127.0.0.1" (an address alone is a /32 or /128).
    if isinstance(value, str):
        return [ip_network(part.strip(), strict=False) for part in value.split(",") if part.strip()]
    return value


class ConsoleSettings(ServiceSettings):
    """The console's web server, who may log in, and how long a session lasts. (It has no
    database and no durable consumer: the shared database and consumer settings go unused.)"""

    health_port: HealthPortSetting = 8087
    consumer_prefix: ConsumerPrefix = "console"

    console_host: str = Field("127.0.0.1", description="Bind address of the console's pages.")
    console_port: int = Field(8088, ge=0, le=65535, description="Port of the pages (0: any).")
    console_public_url: str | None = Field(
        None, description="The URL people open (printed, used in links); None = host:port."
    )
    console_tokens_file: Path | None = Field(
        None,
        description="YAML file of bearer-token digests (`nexus console token`); None = no"
        " token login (a trusted proxy header only).",
    )
    console_session_secret: SecretStr | None = Field(
        None,
        description="Key signing session cookies and CSRF tokens (32+ characters); None = a"
        " random one per process (sessions end at a restart; set it with several replicas).",
        min_length=32,
    )
    console_session_hours: float = Field(
        12.0, gt=0, le=24 * 30, description="Hours a login lasts (the cookie's max age)."
    )
    console_secure_cookie: bool = Field(
        False, description="Mark the session cookie Secure (set it when served over HTTPS)."
    )
    console_trusted_header: str | None = Field(
        None,
        description="Header an authenticating reverse proxy sets to the user's name"
        " (oauth2-proxy: X-Forwarded-User); None = off.",
    )
    console_trusted_proxies: Annotated[list[Network], NoDecode, BeforeValidator(_networks)] = Field(
        default_factory=list,
        description="Addresses (CIDRs, comma-separated) the trusted header is taken from;"
        " from any other address it is ignored.",
    )
    console_trusted_scope: Literal["read", "operate"] = Field(
        "read", description="Scope of a user the trusted header names."
    )
    console_query_timeout: float = Field(
        5.0, gt=0, le=60, description="Seconds a page waits for a query's reply."
    )
    console_git_cache_dir: Path | None = Field(
        None,
        description="Where the run pages' diffs fetch repositories (bare, one per URL); None ="
        " a directory under the system's temporary one.",
    )
    console_git_timeout: float = Field(
        20.0, gt=0, le=300, description="Most seconds one diff's git fetch may take."
    )
    console_live_queue: int = Field(
        1000,
        ge=10,
        description="Live updates buffered per open page; a page that falls further behind"
        " is told to reload.",
    )
