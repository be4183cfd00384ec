"""Where a command talks to: NATS URL and PostgreSQL DSN from flag, env, or the context."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nexus_events.transport.bus import BusSettings

from nexus_cli.contexts import dev_home, resolve
from nexus_cli.devstack.nats_auth import redacted, without_credentials
from nexus_cli.devstack.state import read_state
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Globals


@dataclass(frozen=True)
class Target:
    context: str
    nats_url: str
    database_url: str | None
    dev_home: Path | None
    # The dev stack's operators' credentials (its state file's URL carries them): what the CLI
    # connects with, not who it is (a person's identity is a user they put in the URL or
    # NEXUS_NATS_USER, else their login: nexus_cli.commands.approvals.cli_user).
    stack_user: str | None = None
    stack_password: str | None = field(default=None, repr=False)

    def bus_settings(self, **options: Any) -> BusSettings:
        """How to reach this target's NATS (`options`: BusSettings fields): the dev stack's
        credentials unless NEXUS_NATS_USER names another user."""
        settings = BusSettings(url=self.nats_url, **options)
        if self.stack_user is None or settings.user is not None:
            return settings
        return settings.model_copy(
            update={"user": self.stack_user, "password": self.stack_password}
        )

    @property
    def shown_url(self) -> str:
        """The NATS URL for people's eyes: any password in it masked."""
        return redacted(self.nats_url)


def resolve_target(g: Globals) -> Target:
    """Flag/env first (``--nats-url``, NEXUS_NATS_URL, NEXUS_DATABASE_URL), then the context.

    A dev context reads the dev stack's state file (its URL and the operators' credentials);
    exit 4 if the stack is not running.
    """
    name, spec = resolve(g.context)
    nats_url = g.nats_url or os.environ.get("NEXUS_NATS_URL") or spec.nats_url
    database_url = os.environ.get("NEXUS_DATABASE_URL") or spec.database_url
    home: Path | None = None
    if spec.dev:
        home = dev_home(spec)
        if nats_url is None:
            state = read_state(home)
            if state is None or not state.supervisor_alive() or state.status != "ready":
                raise CliError(
                    f"the dev stack is not running (context {name!r}, {home})",
                    hint="start it with `nexus dev up`, or pick a context with --context",
                    code=ExitCode.UNAVAILABLE,
                )
            nats_url, stack_user, stack_password = without_credentials(state.nats_url or "")
            database_url = database_url or state.database_url
            return Target(name, nats_url, database_url, home, stack_user, stack_password)
    if not nats_url:
        raise CliError(
            f"context {name!r} names no NATS URL",
            hint="`nexus context set NAME --nats-url URL`, or pass --nats-url",
            code=ExitCode.INVALID,
        )
    return Target(name, nats_url, database_url, home)
