"""Session cookies and CSRF tokens, signed with the console's key (HMAC-SHA256).

A session is a signed cookie (no server-side store, so any replica sharing the key serves
it): the user's name and scope, the token entry it was made from, a random session id and an
expiry. CSRF tokens are derived from the session id, so each session has its own and a form
from another session does not pass.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from nexus_console.auth.identity import Scope, Via, Viewer

COOKIE = "nexus_console"


@dataclass(frozen=True, slots=True)
class Session:
    viewer: Viewer
    sid: str
    expires: float
    # The tokens file entry it came from (name and digest prefix): a session of a token that
    # was removed from the file ends at its next request.
    entry: str | None = None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """Makes and checks session cookies and CSRF tokens under one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("the session key must be at least 32 bytes")
        self._key = key

    @classmethod
    def random(cls) -> Signer:
        return cls(secrets.token_bytes(32))

    def _mac(self, purpose: str, data: bytes) -> str:
        return _b64(hmac.new(self._key, purpose.encode() + b"\0" + data, hashlib.sha256).digest())

    def new_session(self, viewer: Viewer, now: float, ttl: float, entry: str | None) -> Session:
        return Session(viewer, secrets.token_urlsafe(16), now + ttl, entry)

    def cookie(self, session: Session) -> str:
        body = {
            "n": session.viewer.name,
            "s": session.viewer.scope.value,
            "v": session.viewer.via.value,
            "i": session.sid,
            "x": session.expires,
            "e": session.entry,
        }
        data = json.dumps(body, separators=(",", ":")).encode()
        return f"{_b64(data)}.{self._mac('session', data)}"

    def session(self, cookie: str | None, now: float) -> Session | None:
        """The session a cookie holds, or None if it is absent, forged, malformed or expired."""
        if not cookie or cookie.count(".") != 1:
            return None
        data_part, mac = cookie.split(".")
        try:
            data = _unb64(data_part)
        except ValueError:
            return None
        if not hmac.compare_digest(mac, self._mac("session", data)):
            return None
        try:
            body = json.loads(data)
            viewer = Viewer(str(body["n"]), Scope(body["s"]), Via(body["v"]))
            session = Session(viewer, str(body["i"]), float(body["x"]), body.get("e"))
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires > now else None

    def csrf(self, session: Session) -> str:
        return self._mac("csrf", session.sid.encode())

    def csrf_ok(self, session: Session, presented: str | None) -> bool:
        return bool(presented) and hmac.compare_digest(str(presented), self.csrf(session))
