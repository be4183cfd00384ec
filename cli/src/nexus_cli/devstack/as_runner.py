"""Exec a runner command as the dev stack's `runner` NATS user: ``python -m
nexus_cli.devstack.as_runner COMMAND...``.

The scheduler passes its own NEXUS_NATS_* on to the runners it starts; this swaps its user and
password for the runner's (read from RUNNER_NATS_PASSWORD, never from a command line), as
compose's ``sh -c`` NEXUS_LOCAL_COMMAND does, then replaces itself with COMMAND (same pid, so
the local runtime's pid file names the runner). A Python launcher rather than ``sh``: the
interpreter stays the command's first word, which the runner's confinement binds back into
its sandbox when it lives in a hidden home's venv.
"""

from __future__ import annotations

import os
import sys

RUNNER_USER = "runner"
RUNNER_PASSWORD_ENV = "RUNNER_NATS_PASSWORD"  # noqa: S105 - a variable name


def runner_environ(parent: dict[str, str]) -> dict[str, str]:
    """`parent` with the runner's NATS identity instead of the scheduler's."""
    password = parent.get(RUNNER_PASSWORD_ENV)
    if not password:
        raise ValueError(f"{RUNNER_PASSWORD_ENV} is not set: no NATS password for the runner")
    return {
        **parent,
        "NEXUS_NATS_USER": RUNNER_USER,
        "NEXUS_NATS_NAME": RUNNER_USER,
        "NEXUS_NATS_PASSWORD": password,
    }


def main(argv: list[str] | None = None) -> None:
    command = sys.argv[1:] if argv is None else argv
    if not command:
        sys.stderr.write("usage: python -m nexus_cli.devstack.as_runner COMMAND...\n")
        raise SystemExit(2)
    try:
        env = runner_environ(dict(os.environ))
    except ValueError as exc:
        sys.stderr.write(f"nexus-runner: {exc}\n")
        raise SystemExit(2) from exc
    try:
        os.execvpe(command[0], command, env)  # noqa: S606 - the scheduler's runner command
    except OSError as exc:
        sys.stderr.write(f"nexus-runner: cannot run {command[0]}: {exc}\n")
        raise SystemExit(127) from exc


if __name__ == "__main__":
    main()
