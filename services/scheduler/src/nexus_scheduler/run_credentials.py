"""A run's NATS credential: the token the scheduler mints for one attempt of a run, and its
verification by the auth callout (pure: no sockets, the clock passed in).

The runner connects as user ``run:<run_id>`` with a password
``v1.<attempt>.<expires>.<grants>.<mac>``, or for a lab run (a replay or fork, docs/lab.md)
``v1.<attempt>.<expires>.<grants>.<source_run_id>.<mac>``: `mac` is an HMAC-SHA256 of
everything before it and the run id, under a key derived from the callout issuer's seed, which
only the scheduler holds. A token names one run, so it cannot be used as another; it ends at
`expires`; the source run it may read is under the MAC, so it cannot be swapped for another.

A warm runner pod on Kubernetes (docs/warm-starts.md) waits with a SLOT credential: user
``warm:<slot>``, password ``v1.<expires>.<mac>`` (the MAC over ``warm:<slot>`` and the body,
which no run id can spell: a run id holds no colon), granted its slot's hand-offs only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

from nexus_events.contract import subjects
from nexus_events.contract.run_access import GRANTS, inbox_prefix
from nexus_events.events.runs import RunConfig

USER_PREFIX = "run:"
WARM_USER_PREFIX = "warm:"
VERSION = "v1"
# What the HMAC key is derived for: the issuer seed signs JWTs, this derived key signs tokens.
_KEY_PURPOSE = b"nexus run credential v1"
_NO_GRANTS = "none"


class CredentialRefusedError(ValueError):
    """A run credential that is malformed, forged, for another run or expired."""


@dataclass(frozen=True)
class RunCredential:
    """What a verified token says: which attempt of which run, what it was granted, until when."""

    run_id: str
    attempt: int
    grants: frozenset[str]
    expires: int  # unix seconds
    # A lab run's source: its transcript, events and checkpoints may be read (run_access).
    source_run_id: str | None = None

    @property
    def user(self) -> str:
        return f"{USER_PREFIX}{self.run_id}"


def token_key(issuer_seed: bytes) -> bytes:
    """The HMAC key of run tokens, derived from the callout issuer's seed."""
    return hmac.new(issuer_seed, _KEY_PURPOSE, hashlib.sha256).digest()


def grants_of(config: RunConfig) -> frozenset[str]:
    """The grants of a run that widen its credential: the `delegate` and `remember` tools."""
    return frozenset(t.name for t in config.tools if t.name in GRANTS)


def _mac(key: bytes, run_id: str, body: str) -> str:
    digest = hmac.new(key, f"{run_id}\n{body}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _body(credential: RunCredential) -> str:
    granted = "+".join(sorted(credential.grants)) or _NO_GRANTS
    body = f"{VERSION}.{credential.attempt}.{credential.expires}.{granted}"
    # Appended, not a new version: tokens without a source keep their five parts.
    return body if credential.source_run_id is None else f"{body}.{credential.source_run_id}"


def mint(key: bytes, credential: RunCredential) -> tuple[str, str]:
    """(user, password) of `credential`, signed with `key`."""
    subjects.validate_token(credential.run_id, "run id")
    if unknown := credential.grants - set(GRANTS):
        raise ValueError(f"unknown grants {sorted(unknown)}")
    if credential.source_run_id is not None:
        subjects.validate_token(credential.source_run_id, "source run id")
    body = _body(credential)
    return credential.user, f"{body}.{_mac(key, credential.run_id, body)}"


def _named(user: str, prefix: str, kind: str, what: str) -> str:
    """What `user` (a `kind` user) names after `prefix`: `what`, a subject token; refused if
    the user is of another kind or the name is not a token."""
    if not user.startswith(prefix):
        raise CredentialRefusedError(f"not a {kind} user: {user!r}")
    name = user[len(prefix) :]
    try:
        subjects.validate_token(name, what)
    except ValueError as exc:
        raise CredentialRefusedError(str(exc)) from exc
    return name


def verify(key: bytes, user: str, password: str, *, now: float) -> RunCredential:
    """The credential `user`/`password` stand for; raise `CredentialRefusedError` saying why not."""
    run_id = _named(user, USER_PREFIX, "run", "run id")
    parts = password.split(".")
    if len(parts) not in {5, 6} or parts[0] != VERSION:
        raise CredentialRefusedError("malformed run token")
    body, mac = ".".join(parts[:-1]), parts[-1]
    # Checked before anything of the body is believed: a forged body is refused as forged.
    if not hmac.compare_digest(mac, _mac(key, run_id, body)):
        raise CredentialRefusedError("run token signature does not match")
    try:
        attempt, expires = int(parts[1]), int(parts[2])
    except ValueError as exc:
        raise CredentialRefusedError("malformed run token") from exc
    grants = frozenset() if parts[3] == _NO_GRANTS else frozenset(parts[3].split("+"))
    if attempt < 1 or not grants <= set(GRANTS):
        raise CredentialRefusedError("malformed run token")
    source = parts[4] if len(parts) == 6 else None
    if source is not None:
        try:
            subjects.validate_token(source, "source run id")
        except ValueError as exc:
            raise CredentialRefusedError(str(exc)) from exc
    if expires <= now:
        raise CredentialRefusedError(f"run token expired at {expires}")
    return RunCredential(run_id, attempt, grants, expires, source)


@dataclass(frozen=True)
class SlotCredential:
    """What a verified slot token says: which warm pod's slot, until when."""

    slot: str
    expires: int  # unix seconds

    @property
    def user(self) -> str:
        return f"{WARM_USER_PREFIX}{self.slot}"


def mint_slot(key: bytes, credential: SlotCredential) -> tuple[str, str]:
    """(user, password) of a warm pod's slot credential, signed with `key`."""
    subjects.validate_token(credential.slot, "warm slot")
    body = f"{VERSION}.{credential.expires}"
    return credential.user, f"{body}.{_mac(key, credential.user, body)}"


def verify_slot(key: bytes, user: str, password: str, *, now: float) -> SlotCredential:
    """The slot credential `user`/`password` stand for; `CredentialRefusedError` saying why not."""
    slot = _named(user, WARM_USER_PREFIX, "warm slot", "warm slot")
    parts = password.split(".")
    if len(parts) != 3 or parts[0] != VERSION:
        raise CredentialRefusedError("malformed slot token")
    body, mac = ".".join(parts[:-1]), parts[-1]
    if not hmac.compare_digest(mac, _mac(key, user, body)):
        raise CredentialRefusedError("slot token signature does not match")
    try:
        expires = int(parts[1])
    except ValueError as exc:
        raise CredentialRefusedError("malformed slot token") from exc
    if expires <= now:
        raise CredentialRefusedError(f"slot token expired at {expires}")
    return SlotCredential(slot, expires)


# Past the run's wall-clock budget, the credential lasts this long more: the run's start
# (an image pull) and its end (publishing the terminal event) happen outside the budget.
EXPIRY_MARGIN_SECONDS = 3600
# A warm pod's slot credential: a pod idle longer is disconnected, its hand-off unanswered, and
# it is replaced (its run starts cold). It grants no more than its slot's hand-offs.
SLOT_CREDENTIAL_TTL_SECONDS = 7 * 24 * 3600


class RunCredentialMinter:
    """Mints the NATS credential of each run attempt the scheduler starts (the runtimes put
    it in the runner's environment: `runner_nats_env`)."""

    def __init__(self, issuer_seed: bytes, *, min_ttl: float) -> None:
        self.key = token_key(issuer_seed)
        self.min_ttl = min_ttl

    def credential(self, config: RunConfig, now: float) -> RunCredential:
        ttl = max(self.min_ttl, config.budgets.max_wall_seconds + EXPIRY_MARGIN_SECONDS)
        source = config.lab.source_run_id if config.lab is not None else None
        return RunCredential(
            config.run_id, config.attempt, grants_of(config), int(now + ttl), source
        )

    def runner_nats_env(self, config: RunConfig, now: float) -> dict[str, str]:
        """``NEXUS_NATS_*`` of the run's runner: its user, token and reply prefix. They replace
        whatever credential the scheduler's own environment holds (token and creds file are
        emptied), so a runner never connects as the scheduler."""
        user, password = mint(self.key, self.credential(config, now))
        return {
            "NEXUS_NATS_NAME": f"runner:{config.run_id}",
            "NEXUS_NATS_USER": user,
            "NEXUS_NATS_PASSWORD": password,
            "NEXUS_NATS_TOKEN": "",
            "NEXUS_NATS_CREDS_FILE": "",
            "NEXUS_NATS_INBOX_PREFIX": inbox_prefix(config.run_id),
        }

    def slot_nats_env(self, slot: str, now: float, ttl: float) -> dict[str, str]:
        """``NEXUS_NATS_*`` of a warm pod waiting in `slot`: the slot's user and token (valid
        `ttl` seconds), no other credential; the run's own comes with its hand-off."""
        user, password = mint_slot(self.key, SlotCredential(slot, int(now + ttl)))
        return {
            "NEXUS_NATS_NAME": f"warm:{slot}",
            "NEXUS_NATS_USER": user,
            "NEXUS_NATS_PASSWORD": password,
            "NEXUS_NATS_TOKEN": "",
            "NEXUS_NATS_CREDS_FILE": "",
        }


__all__ = [
    "EXPIRY_MARGIN_SECONDS",
    "SLOT_CREDENTIAL_TTL_SECONDS",
    "USER_PREFIX",
    "WARM_USER_PREFIX",
    "CredentialRefusedError",
    "RunCredential",
    "RunCredentialMinter",
    "SlotCredential",
    "grants_of",
    "mint",
    "mint_slot",
    "token_key",
    "verify",
    "verify_slot",
]
