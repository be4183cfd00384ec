"""Where a command talks to: NATS URL and PostgreSQL DSN from flag, env, or the context."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nexus_cli.contexts import dev_home, resolve
from nexus_cli.devstack.state import read_state
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Globals


@dataclass(frozen=True)
class Target:
    context: str
    nats_url: str
    database_url: str | None
    dev_home: Path | None


def resolve_target(g: Globals) -> Target:
    """Flag/env first (``--nats-url``, NEXUS_NATS_URL, NEXUS_DATABASE_URL), then the context.

    A dev context reads the dev stack's state file; exit 4 if the stack is not running.
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
            nats_url = state.nats_url
            database_url = database_url or state.database_url
    if not nats_url:
        raise CliError(
            f"context {name!r} names no NATS URL",
            hint="`nexus context set NAME --nats-url URL`, or pass --nats-url",
            code=ExitCode.INVALID,
        )
    return Target(name, nats_url, database_url, home)
