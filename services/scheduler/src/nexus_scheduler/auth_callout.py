"""The auth callout responder: answers nats-server's ``$SYS.REQ.USER.AUTH`` requests for run
credentials with a user JWT holding that run's permissions (and for a warm pod's slot
credential, its slot's), and refuses anything else.

A queue subscription: any scheduler replica may answer. Services' static users are the
callout's ``auth_users`` and never reach it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nexus_events.contract.run_access import run_permissions, warm_slot_permissions
from nexus_events.transport.natsclient import Client

from nexus_scheduler.callout_jwt import AuthRequest, CalloutError, Issuer, read_request
from nexus_scheduler.run_credentials import (
    WARM_USER_PREFIX,
    CredentialRefusedError,
    token_key,
    verify,
    verify_slot,
)

log = logging.getLogger(__name__)

AUTH_SUBJECT = "$SYS.REQ.USER.AUTH"
QUEUE = "nexus-scheduler-auth"


def decide(issuer: Issuer, key: bytes, request: AuthRequest, now: float) -> tuple[str, str]:
    """(user JWT, "") for a valid run or slot token, else ("", why it is refused)."""
    if request.user.startswith(WARM_USER_PREFIX):
        try:
            slot = verify_slot(key, request.user, request.password, now=now)
        except CredentialRefusedError as exc:
            return "", str(exc)
        perms = warm_slot_permissions(slot.slot)
        jwt = issuer.user_jwt(
            request.user_nkey, slot.user, perms, expires=slot.expires, now=int(now)
        )
        return jwt, ""
    try:
        cred = verify(key, request.user, request.password, now=now)
    except CredentialRefusedError as exc:
        return "", str(exc)
    perms = run_permissions(cred.run_id, cred.attempt, cred.grants, cred.source_run_id)
    jwt = issuer.user_jwt(request.user_nkey, cred.user, perms, expires=cred.expires, now=int(now))
    return jwt, ""


class AuthCalloutResponder:
    """Verifies run tokens and answers with the run's user JWT (see module docstring)."""

    def __init__(
        self, nc: Client, issuer: Issuer, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.nc = nc
        self.issuer = issuer
        self.key = token_key(issuer.seed)
        self.clock = clock
        self._sub: Subscription | None = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(AUTH_SUBJECT, queue=QUEUE, cb=self._on_request)

    async def stop(self) -> None:
        if self._sub is not None:
            # A closed connection has dropped the subscription already.
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
            self._sub = None

    async def _on_request(self, msg: Msg) -> None:
        if not msg.reply:
            return
        try:
            request = read_request(msg.data)
        except CalloutError as exc:
            # No user nkey to answer for: the server times the connection out.
            log.warning("auth callout: %s", exc)
            return
        now = self.clock()
        jwt, error = decide(self.issuer, self.key, request, now)
        if error:
            log.warning("auth callout refused %r: %s", request.user, error)
        answer = self.issuer.response(request, jwt=jwt, error=error, now=int(now))
        try:
            await self.nc.publish(msg.reply, answer.encode())
        except nats.errors.Error as exc:  # the server retries nothing: the client reconnects
            log.warning("auth callout: could not answer for %r: %s", request.user, exc)


__all__ = ["AUTH_SUBJECT", "AuthCalloutResponder", "decide"]
