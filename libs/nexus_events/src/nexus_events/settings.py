"""Service settings under one environment prefix, ``NEXUS_``, with renamed prefixes kept.

The scheduler read ``NEXUS_SCHEDULER_<FIELD>`` and the runner ``NEXUS_RUNNER_<FIELD>``; all
services now read ``NEXUS_<FIELD>``. A settings class that had another prefix names it in
`old_env_prefix`: its variables still count, below the new names (a variable set under both
takes the new one), and each one found is reported with a `FutureWarning` naming the new
variable, so a deployment keeps working while it is moved over.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
)

ENV_PREFIX = "NEXUS_"


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
    """Base of a service's settings; a subclass sets ``env_prefix=ENV_PREFIX`` and, if it
    had another prefix, `old_env_prefix`."""

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


__all__ = ["ENV_PREFIX", "NexusSettings", "OldPrefixSource"]
