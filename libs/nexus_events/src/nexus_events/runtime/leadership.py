"""Singletons behind a lease: of a service's replicas, only the holder of its KV lease runs
the jobs one replica may run (projections, periodic passes); the others stand by.

`Leadership` campaigns for a `nexus_events.runtime.lease.Lease`: it tries to take the key when it
starts, then every `ttl / 10` while standing by (and at once when the watch sees the key
deleted, i.e. a clean hand-over), and renews it every `ttl / 3` while leading. On taking it,
the service's `lead` callback starts the singletons (from their checkpoints); when the lease
is lost (a renewal refused, or no successful write for `ttl`), or on stop, `step_down` stops
them, and only then is the key deleted, so the next leader never overlaps a stopping one.

A crashed leader's key expires `ttl` after its last renewal, so a standby takes over within
`ttl` of the crash plus one standby round (`ttl / 10`). A leader learns that another replica
wrote the key from the watch at once, and steps down. Leader changes are logged at INFO, a
lost lease at WARNING, NATS errors during a round as one line: none with a traceback.

Besides `fence()` (may this replica still act?), a leader has a fence token, `term()`: its
lease revision and the bucket's creation time, which grow with every new holder, so a store
that remembers the newest token it saw refuses a deposed leader's writes (the scheduler's
snapshots).

`nexus_events.transport.fenced_projection.FencedProjectionRunner` is a `ProjectionRunner` that
commits only while the lease is held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Literal

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext

from nexus_events.contract.streams import StreamSettings
from nexus_events.runtime.lease import Lease, LeaseTerm, default_holder

log = logging.getLogger(__name__)

Role = Literal["leader", "standby"]
# Errors of one campaign round that mean "NATS or the database is away": one warning line,
# and the next round tries again.
_AWAY = (nats.errors.Error, nats.js.errors.Error, OSError, TimeoutError)
# A standby tries this often per TTL: a crashed leader's key is found gone at most ttl/10
# after it expired (the server does not announce expiry; a delete it does, via the watch).
STANDBY_ROUNDS_PER_TTL = 10
# A leader renews this often per TTL, as the scheduler does: two renewals may fail in a row
# (a NATS blip, a leader election of the KV stream) before the key can expire.
RENEWALS_PER_TTL = 3
# After a failed renewal: a JetStream leader election of the bucket's stream takes a few
# seconds (measured on a 3-node cluster: a renewal sent as the stream's leader node died
# timed out after 5 s, the next one went through), so retry each second while still ours.
RENEW_RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class LeadershipStatus:
    """What a status query says about the answering replica."""

    role: Role
    replica: str
    holder: str | None
    bucket: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "replica": self.replica,
            "holder": self.holder,
            "lease_bucket": self.bucket,
        }


class Leadership:
    """Runs `lead()` while this replica holds the lease in `bucket`, `step_down()` when it
    stops holding it (lost, or `stop`). Both are the service's; `lead` may raise (the
    singletons are then stepped down, the lease given back, and the next round tries again).
    """

    def __init__(
        self,
        js: JetStreamContext,
        *,
        service: str,
        bucket: str,
        ttl: float,
        lead: Callable[[], Awaitable[None]],
        step_down: Callable[[], Awaitable[None]],
        replicas: int | None = None,
        holder: str | None = None,
    ) -> None:
        self.service = service
        self.ttl = ttl
        if replicas is None:  # the bucket's copies, as the streams' (NEXUS_STREAMS_REPLICAS)
            replicas = StreamSettings().replicas
        self.lease = Lease(js, bucket, holder or default_holder(), ttl, replicas=replicas)
        self._lead = lead
        self._step_down = step_down
        self.leading = False
        self._stopping = asyncio.Event()
        # Wakes the campaign at once: stopping, or the lease found lost.
        self._wake = asyncio.Event()
        self._campaign: asyncio.Task[None] | None = None
        self._renewal: asyncio.Task[None] | None = None

    @property
    def holder(self) -> str:
        """This replica's id in the lease (``host/pid/…``)."""
        return self.lease.holder

    @property
    def role(self) -> Role:
        return "leader" if self.leading else "standby"

    @property
    def campaigning(self) -> bool:
        """Started, not stopping, and the campaign alive (for readiness)."""
        task = self._campaign
        return task is not None and not task.done() and not self._stopping.is_set()

    @property
    def campaign(self) -> asyncio.Task[None] | None:
        """The campaign task (None before `start` and once `stop` has begun)."""
        return self._campaign

    def status(self) -> LeadershipStatus:
        return LeadershipStatus(self.role, self.holder, self.lease.owner, self.lease.bucket)

    async def fence(self) -> bool:
        """Whether this replica may still act as the leader (`Lease.still_held`: no round
        trip). False also wakes the campaign, which steps down."""
        if await self.lease.still_held():
            return True
        self._lost("fenced")
        return False

    async def term(self) -> LeaseTerm | None:
        """This leader's fence token (see the module); None, and stepping down, once the
        lease is not held (as `fence`)."""
        if not await self.fence() or self.lease.revision is None:
            return None
        return LeaseTerm(self.lease.revision, self.lease.epoch)

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self, stack: AsyncExitStack) -> None:
        """`start`, with `stop` on `stack`: it runs after everything pushed later, so the
        singletons commit the batch in hand before the key is deleted and a standby takes
        over at once."""
        stack.push_async_callback(self.stop)
        await self.start()

    async def start(self, *, first_round: Literal["inline", "background"] = "inline") -> None:
        """One round now (a replica that finds the lease free leads before this returns),
        then campaign in the background. With ``first_round="background"`` the first round
        is the campaign's too, so a long `lead` (the scheduler's rebuild) does not hold up
        the service's start."""
        if first_round == "inline":
            await self._round()
        self._campaign = asyncio.create_task(
            self._campaign_loop(round_first=first_round == "background"),
            name=f"{self.service}:leadership",
        )

    async def stop(self) -> None:
        """Stop campaigning, step down if leading (the singletons finish what they hold),
        then delete the key so a standby takes over at once."""
        self._stopping.set()
        self._wake.set()
        task, self._campaign = self._campaign, None
        if task is not None and not task.done():
            await task
        if self.leading:
            await self._stand_down("stopping")
        await self._cancel_renewal()
        await self.lease.release()

    # -- the campaign ----------------------------------------------------------------------

    async def _campaign_loop(self, *, round_first: bool = False) -> None:
        if round_first:
            await self._round()
        while not self._stopping.is_set():
            period = self.ttl / (RENEWALS_PER_TTL if self.leading else STANDBY_ROUNDS_PER_TTL)
            self.lease.changed.clear()
            # The watch wakes a standby when the key is deleted (free now), and a leader when
            # another replica wrote it (no longer ours).
            waits = [
                asyncio.ensure_future(self._wake.wait()),
                asyncio.ensure_future(self.lease.changed.wait()),
            ]
            await asyncio.wait(waits, timeout=period, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waits:
                waiter.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
            self._wake.clear()
            if not self._stopping.is_set():
                await self._round()

    async def _round(self) -> None:
        try:
            if self.leading and not await self.lease.still_held():
                await self._stand_down("lost")
            if not self.leading and await self.lease.acquire():
                await self._take_over()
        except _AWAY as exc:
            log.warning("%s: lease round failed: %s", self.service, exc)
        except Exception:  # the campaign must outlive anything; say what happened
            log.exception("%s: lease round failed", self.service)

    async def _take_over(self) -> None:
        # Renewed in its own task from now on, so a long start (a memory re-embed) cannot let
        # the key expire under a replica acting on it.
        self._renewal = asyncio.create_task(self._renew_loop(), name=f"{self.service}:renew")
        self.leading = True
        try:
            await self._lead()
        except BaseException:
            # Half started: stop what did start and give the lease back for another try.
            await self._stand_down("start failed")
            await self._cancel_renewal()
            await self.lease.release()
            raise
        log.info(
            "%s: leading (lease %s taken by %s)",
            self.service,
            self.lease.bucket,
            self.holder,
            extra={"role": "leader", "holder": self.holder, "lease_bucket": self.lease.bucket},
        )

    async def _stand_down(self, why: str) -> None:
        was_leading, self.leading = self.leading, False
        try:
            await self._step_down()
        finally:
            if why != "stopping":
                await self._cancel_renewal()
        if was_leading:
            log.info(
                "%s: standing by (%s)",
                self.service,
                why,
                extra={"role": "standby", "holder": self.holder, "lease_bucket": self.lease.bucket},
            )

    def _lost(self, why: str) -> None:
        if self.leading:
            log.warning(
                "%s: lease %s lost (%s); stepping down", self.service, self.lease.bucket, why
            )
        self._wake.set()

    async def _renew_loop(self) -> None:
        period = wait = self.ttl / RENEWALS_PER_TTL
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=wait)
            if self._stopping.is_set():
                return
            wait = period
            try:
                renewed = await self.lease.renew()
            except _AWAY as exc:
                # Not renewed this time (a node lost mid-request: nats-py waits out its 5 s
                # request timeout); still ours until `ttl` after the last write, so try again
                # soon rather than a whole period later.
                log.warning("%s: lease renewal failed: %s", self.service, exc)
                if not await self.lease.still_held():
                    self._lost("not renewed within the TTL")
                    return
                wait = min(period, RENEW_RETRY_SECONDS)
                continue
            except Exception:  # the renewal must outlive anything but a lost lease
                log.exception("%s: lease renewal failed", self.service)
                wait = min(period, RENEW_RETRY_SECONDS)
                continue
            if not renewed:
                self._lost("taken or deleted")
                return

    async def _cancel_renewal(self) -> None:
        task, self._renewal = self._renewal, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


__all__ = [
    "RENEWALS_PER_TTL",
    "RENEW_RETRY_SECONDS",
    "STANDBY_ROUNDS_PER_TTL",
    "Leadership",
    "LeadershipStatus",
    "Role",
]
