"""Service settings under one environment prefix, ``NEXUS_``: the root class, with renamed
prefixes kept, and `ServiceSettings`, the fields every long-running service shares.

The scheduler read ``NEXUS_SCHEDULER_<FIELD>`` and the runner ``NEXUS_RUNNER_<FIELD>``; all
services now read ``NEXUS_<FIELD>``. A settings class that had another prefix names it in
`old_env_prefix`: its variables still count, below the new names (a variable set under both
takes the new one), and each one found is reported with a `FutureWarning` naming the new
variable, so a deployment keeps working while it is moved over.

A service's settings extend `ServiceSettings` and give a default only where theirs differs:
its health port always (each service has its own, from the service table, so several can
share a host), its consumer prefix and pool size where they differ. The field types below
carry their constraints and descriptions, so such an override is one line
(``health_port: HealthPortSetting = 8083``).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

if TYPE_CHECKING:
    import asyncpg

ENV_PREFIX = "NEXUS_"
_OFF = frozenset({"", "off", "none"})


def _off_is_none(value: Any) -> Any:
    # An environment variable cannot hold None: "off" (or empty, or "none") turns it off.
    if isinstance(value, str) and value.strip().lower() in _OFF:
        return None
    return value


# A settings field for a health endpoint's port: a number (0 = any free port) or off (None;
# "off", "none" or empty from the environment). Here, not in nexus_events.runtime.health, so
# settings load without aiohttp (the health extra).
HealthPort = Annotated[int | None, BeforeValidator(_off_is_none)]

# The fields a service may give its own default, with the constraints and descriptions every
# service shares.
HealthPortSetting = Annotated[
    Annotated[int, Field(ge=0, le=65535)] | None,
    BeforeValidator(_off_is_none),
    Field(description="HTTP port of /healthz and /readyz (0: any free port; off: none)."),
]
ConsumerPrefix = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9_-]+$", description="Prefix of durable consumer names.")
]
PoolSize = Annotated[int, Field(gt=1, description="Most PostgreSQL connections.")]
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/nexus"


class OldPrefixSource(EnvSettingsSource):
    """The environment read under a settings class's old prefix, warning per variable found."""

    def __init__(self, settings_cls: type[BaseSettings], old_prefix: str) -> None:
        super().__init__(settings_cls, env_prefix=old_prefix)
        self.old_prefix = old_prefix
        self.new_prefix = str(settings_cls.model_config.get("env_prefix") or "")

    def __call__(self) -> dict[str, Any]:
        found = super().__call__()
        for name in found:
            key = name.upper()
            warnings.warn(
                f"{self.old_prefix}{key} is deprecated: set {self.new_prefix}{key} instead",
                FutureWarning,
                stacklevel=2,
            )
        return found


class NexusSettings(BaseSettings):
    """Root of every Nexus process's settings: ``NEXUS_<FIELD>``, unknown variables ignored,
    and, if the class had another prefix, that one too (`old_env_prefix`). The runner (one
    process per run, no health port) and the scheduler extend it directly; the long-running
    services through `ServiceSettings`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")
    old_env_prefix: ClassVar[str | None] = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        if cls.old_env_prefix is None:
            return init_settings, env_settings, dotenv_settings, file_secret_settings
        old = OldPrefixSource(settings_cls, cls.old_env_prefix)
        return init_settings, env_settings, old, dotenv_settings, file_secret_settings


class ServiceSettings(NexusSettings):
    """What every long-running service on the bus and PostgreSQL is tuned by: its health
    endpoint, its drain, its consumers, its database. `health_port` has no default here: a
    service that forgets its own fails to load rather than taking another's."""

    database_url: str = Field(DEFAULT_DATABASE_URL, description="PostgreSQL DSN (asyncpg).")
    db_pool_size: PoolSize = 4
    # Each consumer loop notices a stop within this many seconds.
    fetch_timeout: float = Field(1.0, gt=0, le=30, description="Seconds one fetch waits.")
    health_host: str = Field("127.0.0.1", description="Bind address of the health endpoint.")
    health_port: HealthPortSetting
    drain_timeout: float = Field(30.0, gt=0, description="Most seconds to drain on SIGTERM.")
    consumer_prefix: ConsumerPrefix

    async def create_pool(self, min_size: int = 1) -> asyncpg.Pool[Any]:
        """A pool on `database_url` of at most `db_pool_size` connections."""
        import asyncpg

        return await asyncpg.create_pool(
            self.database_url, min_size=min_size, max_size=self.db_pool_size
        )


__all__ = [
    "DEFAULT_DATABASE_URL",
    "ENV_PREFIX",
    "ConsumerPrefix",
    "HealthPort",
    "HealthPortSetting",
    "NexusSettings",
    "OldPrefixSource",
    "PoolSize",
    "ServiceSettings",
]
