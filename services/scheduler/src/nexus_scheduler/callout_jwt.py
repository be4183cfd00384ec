"""NATS JWTs of the auth callout: read the server's authorization request, and write the user
JWT and the authorization response, signed with the callout issuer's account nkey.

The encoding is nats-io/jwt v2's: ``base64url(header).base64url(claims).base64url(sig)``
with header ``{"typ":"JWT","alg":"ed25519-nkey"}``, an Ed25519 signature of the first two
parts, and ``jti`` the base32 SHA-512/256 of the claims without it. nats-server checks the
signature against ``iss``, the user JWT's ``iss`` against ``auth_callout.issuer``, its ``sub``
against the request's ``user_nkey``, and puts the user in the account its ``aud`` names.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any

import nkeys  # type: ignore[import-untyped]
from nexus_events.contract.run_access import RunPermissions
from pydantic import BaseModel, ConfigDict, Field, ValidationError

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
# The account users of a config without accounts live in.
GLOBAL_ACCOUNT = "$G"


class CalloutError(ValueError):
    """An authorization request that cannot be read, or a bad issuer seed."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _jti(claims: dict[str, Any]) -> str:
    # Go's json.Marshal of ClaimsData: compact, in field order; an id only, not checked.
    body = json.dumps(claims, separators=(",", ":")).encode()
    digest = hashlib.new("sha512_256", body).digest()
    return base64.b32encode(digest).rstrip(b"=").decode()


class Issuer:
    """The callout issuer: an account nkey whose public key the server config names."""

    def __init__(self, seed: str) -> None:
        try:
            self._kp = nkeys.from_seed(seed.encode())
            public = self._kp.public_key.decode()
        except (nkeys.NkeysError, ValueError, TypeError) as exc:
            raise CalloutError(f"the auth callout issuer seed is not an nkey seed: {exc}") from exc
        if not public.startswith("A"):
            raise CalloutError("the auth callout issuer seed must be an account seed (SA...)")
        self.public_key: str = public
        self.seed = seed.encode()

    @staticmethod
    def generate() -> str:
        """A new account seed (``SA...``): `nexus` prints one for an operator's setup."""
        return str(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT).decode())

    def encode(self, claims: dict[str, Any], *, now: int) -> str:
        """`claims` (``sub``, ``aud``, ``exp``, ``name``, ``nats``) as a JWT this issuer signed."""
        data = {k: v for k, v in claims.items() if k != "nats"}
        data |= {"iat": now, "iss": self.public_key}
        ordered: dict[str, Any] = {
            k: data[k] for k in ("aud", "exp", "iat", "iss", "name", "sub") if k in data
        }
        full = {"jti": _jti(ordered), **ordered, "nats": claims["nats"]}
        head = _b64(json.dumps(_HEADER, separators=(",", ":")).encode())
        body = _b64(json.dumps(full, separators=(",", ":")).encode())
        signature = self._kp.sign(f"{head}.{body}".encode())
        return f"{head}.{body}.{_b64(signature)}"

    def user_jwt(
        self, user_nkey: str, name: str, permissions: RunPermissions, *, expires: int, now: int
    ) -> str:
        """The user JWT of a run: its allow lists, placed in the global account, until `expires`."""
        nats: dict[str, Any] = {
            "pub": {"allow": list(permissions.publish)},
            "sub": {"allow": list(permissions.subscribe)},
        }
        if permissions.allow_responses:
            # One reply per request received, within the server's default window (ttl 0).
            nats["resp"] = {"max": 1, "ttl": 0}
        nats |= {
            "subs": -1,
            "data": -1,
            "payload": -1,
            "type": "user",
            "version": 2,
        }
        claims = {"sub": user_nkey, "aud": GLOBAL_ACCOUNT, "exp": expires, "name": name}
        return self.encode({**claims, "nats": nats}, now=now)

    def response(self, request: AuthRequest, *, jwt: str = "", error: str = "", now: int) -> str:
        """The authorization response to `request`: a user JWT, or an error saying why not."""
        nats: dict[str, Any] = {"type": "authorization_response", "version": 2}
        if jwt:
            nats["jwt"] = jwt
        if error:
            nats["error"] = error
        claims = {"sub": request.user_nkey, "aud": request.server_id}
        return self.encode({**claims, "nats": nats}, now=now)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Server(_Model):
    id: str


class _ConnectOpts(_Model):
    user: str = ""
    password: str = Field("", alias="pass")


class _Request(_Model):
    server_id: _Server
    user_nkey: str
    connect_opts: _ConnectOpts = Field(default_factory=lambda: _ConnectOpts.model_validate({}))
    type: str


class AuthRequest(_Model):
    """What the responder needs of nats-server's authorization request."""

    server_id: str
    user_nkey: str
    user: str
    password: str


def read_request(token: bytes) -> AuthRequest:
    """The authorization request a JWT of the server carries; `CalloutError` if it is not one."""
    parts = token.decode(errors="replace").split(".")
    if len(parts) != 3:
        raise CalloutError("the authorization request is not a JWT")
    try:
        claims = json.loads(_unb64(parts[1]))
        nats = _Request.model_validate(claims["nats"])
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        raise CalloutError(f"unreadable authorization request: {exc}") from exc
    if nats.type != "authorization_request":
        raise CalloutError(f"not an authorization request: {nats.type!r}")
    return AuthRequest(
        server_id=nats.server_id.id,
        user_nkey=nats.user_nkey,
        user=nats.connect_opts.user,
        password=nats.connect_opts.password,
    )


__all__ = ["GLOBAL_ACCOUNT", "AuthRequest", "CalloutError", "Issuer", "read_request"]
