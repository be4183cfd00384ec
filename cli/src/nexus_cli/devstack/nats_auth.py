"""The dev stack's NATS users: their passwords in the stack home, the server config rendered by
nexus_events.runtime.nats_config (compose's and Kubernetes' very text), and what each process
connects with.

Passwords are generated at the first `nexus dev up` (`secrets`), kept in
HOME/nats-passwords.json (mode 0600) and reused on every restart; a user the contract adds
later gets one then. nats-server reads them from its environment (the rendered config names
``$NEXUS_<USER>_NATS_PASSWORD``); each service gets only its own, as NEXUS_NATS_USER and
NEXUS_NATS_PASSWORD; people and the CLI get the operators' `admin` inside the NATS URL of the
state file, which `redacted` masks wherever it is shown to people.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from nexus_events.runtime.nats_config import (
    ADMIN,
    AUTH_CALLOUT_ISSUER_VARIABLE,
    Cluster,
    password_variable,
    render,
    users,
)

if TYPE_CHECKING:
    from nexus_scheduler.callout_jwt import Issuer

PASSWORDS_FILE = "nats-passwords.json"
# The auth callout issuer's account seed (SA...): the scheduler signs each run's credential
# with it; nats-server is given only its public key.
ISSUER_FILE = "nats-callout-issuer.seed"
# The scheduler setting holding that seed (SchedulerSettings.auth_callout_seed).
ISSUER_SEED_ENV = "NEXUS_AUTH_CALLOUT_SEED"
# The config nats-server loads, under HOME/nats (no secret in it: only variable names).
CONFIG_FILE = "nats.conf"
# The environment variable holding a cluster node's server name (the rendered `server_name`).
SERVER_NAME_VARIABLE = "NATS_SERVER_NAME"
# Bits of randomness in a password: 32 bytes, 256 bits, beyond any guessing.
PASSWORD_BYTES = 32
MASK = "***"
# scheme://user:PASSWORD@ in a URL: the part `redacted` masks.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@,]*:)[^\s@/,]+@")


class PasswordsFileError(ValueError):
    """The stack's passwords file exists but is not a JSON object of user -> password."""


def _new_password() -> str:
    # Hex behind a letter: URL-safe (it goes into nats:// URLs) and never read as a number or a
    # boolean when nats-server resolves the variable.
    return "nx" + secrets.token_hex(PASSWORD_BYTES)


def _read(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise PasswordsFileError(
            f"{path}: cannot read the dev stack's NATS passwords ({exc}); delete it to get new ones"
        ) from exc
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in data.items()
    ):
        raise PasswordsFileError(
            f"{path}: not a JSON object of user -> password; delete it to get new ones"
        )
    return data


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, readable by its owner only from the first byte."""
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    tmp.replace(path)


def stack_passwords(home: Path) -> dict[str, str]:
    """Every NATS user's password (`nexus_events.runtime.nats_config.users`): those HOME keeps, and
    new ones for users it lacks, saved (mode 0600) before they are returned.

    Raises `PasswordsFileError` when the file exists but cannot be read as passwords.
    """
    path = home / PASSWORDS_FILE
    kept = _read(path)
    passwords = {user: kept.get(user) or _new_password() for user in users()}
    if passwords != kept:
        _write_private(path, json.dumps({**kept, **passwords}, indent=2))
    # Tightened even when nothing changed: a file copied in or restored keeps no looser mode.
    path.chmod(0o600)
    return passwords


def _issuer_type() -> type[Issuer]:
    # The scheduler comes with the dev-stack extra only: the CLI's image (and `nexus mcp
    # serve`, which imports this module for `redacted`) runs without it.
    from nexus_scheduler.callout_jwt import Issuer

    return Issuer


def stack_issuer(home: Path) -> str:
    """The auth callout issuer's account seed HOME keeps (made at the first `dev up`, mode
    0600), as text. Raises `PasswordsFileError` when the file holds no account seed."""
    path = home / ISSUER_FILE
    try:
        seed = path.read_text().strip()
    except FileNotFoundError:
        seed = _issuer_type().generate()
        _write_private(path, seed + "\n")
    path.chmod(0o600)
    issuer_public_key(seed, path)
    return seed


def issuer_public_key(seed: str, where: Path | None = None) -> str:
    """The public key (A...) of the account `seed`: what the server's auth_callout names."""
    from nexus_scheduler.callout_jwt import CalloutError

    try:
        return _issuer_type()(seed).public_key
    except CalloutError as exc:
        raise PasswordsFileError(
            f"{where or 'the issuer seed'}: {exc}; delete it to get a new one"
        ) from exc


def server_env(passwords: dict[str, str], issuer_seed: str) -> dict[str, str]:
    """What nats-server's environment needs for the rendered config: every user's password
    and the auth callout issuer's public key."""
    env = {password_variable(user): password for user, password in passwords.items()}
    env[AUTH_CALLOUT_ISSUER_VARIABLE] = issuer_public_key(issuer_seed)
    return env


def write_server_config(nats_home: Path, cluster: Cluster | None = None) -> Path:
    """Render the single server's config (or a cluster node's) into NATS_HOME; its path."""
    path = nats_home / CONFIG_FILE
    path.write_text(render(cluster))
    return path


def service_env(user: str, passwords: dict[str, str]) -> dict[str, str]:
    """The bus settings (nexus_events.transport.connect.BusSettings) that make a process `user`."""
    return {"NEXUS_NATS_USER": user, "NEXUS_NATS_PASSWORD": passwords[user]}


def with_credentials(urls: str, user: str, password: str) -> str:
    """Each of the comma-separated `urls` with ``user:password@`` (how nats-py and the nats CLI
    take credentials from a URL)."""
    out = []
    for url in urls.split(","):
        parts = urlsplit(url.strip())
        host = parts.netloc.rpartition("@")[2]
        out.append(urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}")))
    return ",".join(out)


def admin_url(urls: str, passwords: dict[str, str]) -> str:
    """The operators' URL(s): what the state file gives people and the CLI."""
    return with_credentials(urls, ADMIN, passwords[ADMIN])


def redacted(text: str) -> str:
    """`text` (URLs, or a message quoting one) with the password of every URL in it masked,
    for people's eyes and logs."""
    return _URL_PASSWORD.sub(rf"\g<head>{MASK}@", text)


def without_credentials(urls: str) -> tuple[str, str | None, str | None]:
    """(the URLs without userinfo, the first URL's user, its password)."""
    plain, user, password = [], None, None
    for url in urls.split(","):
        parts = urlsplit(url.strip())
        if user is None and parts.username:
            user, password = parts.username, parts.password
        plain.append(urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])))
    return ",".join(plain), user, password
