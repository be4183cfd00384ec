"""Where a run's secrets come from, so `SecretRegistry` can keep them out of every record.

Tracked from the start: the runner's own secret settings and secret-named environment
variables, the NATS credentials file, and the `.env`-like files of the cloned workspace.
While the run works: `.env`-like files it reads, and the output of shell commands that name
a path outside the workspace (``~``, ``/proc``, ``..``, an absolute path) — what those read
is treated as secret whatever it looks like.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import SecretStr

from nexus_runner.config import RunnerSettings
from nexus_runner.safety import SecretRegistry

# File names whose content is secret (credentials, keys, environment files).
SECRET_FILE_GLOBS = (
    ".env", ".env.*", "*.env", "*.pem", "*.key", "id_rsa*", "id_ed25519*", "id_ecdsa*",
    "id_dsa*", "credentials", "credentials.*", "*credentials*.json", ".netrc", ".npmrc",
    ".pypirc", "*.creds", "secrets.*", "*.secret",
)  # fmt: skip
# Secret files larger than this are not read for values (they are not config files).
MAX_SECRET_FILE_BYTES = 1_000_000
# Environment variable names whose values are secret.
# Whole words of the name: NEXUS_GIT_AUTHOR_NAME is not an AUTH, MAX_TOKENS not a TOKEN.
_SECRET_NAME = re.compile(
    r"(?i)(?:^|_)(?:api_?key|key|token|secret|password|passwd|pass|creds|credentials?|auth)"
    r"(?:_|$)"
)
# Names of where a secret is, not of the secret (the file is read instead, when known).
_LOCATION_SUFFIXES = ("_FILE", "_PATH", "_DIR", "_URL")
# Variables whose values are never secret (and would redact ordinary text).
_PLAIN_ENV = frozenset({"PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "USER", "SHELL", "PWD"})
# Absolute paths a command may name without reading anything secret: programs, /dev/null.
_PLAIN_PATHS = ("/usr/", "/bin/", "/sbin/", "/lib", "/dev/null", "/opt/", "/etc/alternatives/")
# `~`, `$HOME`, `..`, a file: URL or an absolute path (not the path of another URL: that is
# the network, the guard's).
_OUTSIDE = re.compile(
    r"(?:^|[^\w.:/])(~|\$\{?HOME\b|\.\.(?:/|$)|file:/|/[^\s'\"|;&)<>]*)", re.IGNORECASE
)


def is_secret_file(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    if base.endswith(".pub") or base in {".env.example", ".env.sample", ".env.template"}:
        return False
    return any(fnmatch.fnmatch(base, glob) for glob in SECRET_FILE_GLOBS)


def track_file(secrets: SecretRegistry, path: Path) -> int:
    """Track the values of one secret file; how many were new."""
    try:
        if path.stat().st_size > MAX_SECRET_FILE_BYTES:
            return 0
        return secrets.add_text(path.read_text(errors="replace"))
    except OSError:
        return 0


def track_workspace(secrets: SecretRegistry, root: Path) -> int:
    """Track the `.env`-like files of the workspace (``.git`` skipped)."""
    added = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            if is_secret_file(name):
                added += track_file(secrets, Path(dirpath) / name)
    return added


def track_runner(
    secrets: SecretRegistry, settings: RunnerSettings, env: Mapping[str, str] | None = None
) -> None:
    """Track the runner's own secrets: secret settings, secret-named environment variables,
    the NATS credentials file."""
    env = os.environ if env is None else env
    for name, field in type(settings).model_fields.items():
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            secrets.add(value.get_secret_value())
        elif isinstance(value, dict):
            for item in value.values():
                if isinstance(item, SecretStr):
                    secrets.add(item.get_secret_value())
        elif field.annotation is str and _is_secret_name(name) and value != "not-needed":
            secrets.add(value)
    for name, value in env.items():
        if _is_secret_name(name):
            secrets.add(value)
        else:  # the run id, URLs, paths, numbers: read back from /proc, still not secret
            secrets.allow(value)
    creds = env.get("NEXUS_NATS_CREDS_FILE")
    if creds:
        track_file(secrets, Path(creds))


def _is_secret_name(name: str) -> bool:
    upper = name.upper()
    return (
        upper not in _PLAIN_ENV
        and not upper.endswith(_LOCATION_SUFFIXES)
        and _SECRET_NAME.search(name) is not None
    )


def reads_outside(command: str, root: Path) -> bool:
    """Whether `command` names a place outside the workspace (then its output is secret)."""
    for match in _OUTSIDE.finditer(command):
        named = match.group(1)
        if not named.startswith("/"):
            return True
        if named == "/" or not named.startswith(_PLAIN_PATHS):
            try:
                inside = Path(named).resolve().is_relative_to(root)
            except (OSError, ValueError):
                inside = False
            if not inside:
                return True
    return False
