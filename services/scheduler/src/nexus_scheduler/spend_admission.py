"""The scheduler's budget check before a dispatch: asks `nexus.spend.v1.admit.<run_id>`.

docs/spend.md ("What happens when a budget is reached", "Operating it"): if the spend service
does not answer, the scheduler admits. That is safe because admission is not where a budget is
held: the runner reserves each model call before making it and waits while nobody answers, so
a run admitted here still never spends unreserved. Failing closed instead would stop every
dispatch whenever the spend service is down, for no gain in what a budget bounds.
"""

from __future__ import annotations

import logging

import nats.errors
from nats.aio.client import Client
from nexus_events.contract import subjects
from nexus_events.events.spend import SpendAdmit, SpendVerdict
from pydantic import ValidationError

log = logging.getLogger(__name__)

# nats.micro puts this header on error replies.
_SERVICE_ERROR = "Nats-Service-Error"


class SpendAdmission:
    """`ask` returns the spend service's verdict on starting a run, or None (admit) when it is
    switched off, does not answer within `timeout` or answers an error."""

    def __init__(self, nc: Client, *, timeout: float = 2.0, enabled: bool = True) -> None:
        self.nc = nc
        self.timeout = timeout
        self.enabled = enabled
        # Logged once per outage, not once per run: a queue of a thousand runs dispatched
        # while spend is down would otherwise log a thousand warnings.
        self._unavailable = False

    async def ask(self, run_id: str) -> SpendVerdict | None:
        if not self.enabled:
            return None
        verdict, why = await self._request(run_id)
        if verdict is None:
            if not self._unavailable:
                log.warning(
                    "budget admission check of %s: %s; admitting (the runner's reservations"
                    " still hold the run to its budgets; docs/spend.md)",
                    run_id,
                    why,
                )
            self._unavailable = True
            return None
        if self._unavailable:
            log.info("the spend service answers admission checks again")
            self._unavailable = False
        return verdict

    async def _request(self, run_id: str) -> tuple[SpendVerdict | None, str]:
        """The verdict, or None and why there is none."""
        body = SpendAdmit().model_dump_json().encode()
        try:
            reply = await self.nc.request(subjects.spend_admit(run_id), body, timeout=self.timeout)
        except nats.errors.NoRespondersError:
            return None, "no spend service answers"
        except nats.errors.TimeoutError:
            return None, f"no answer within {self.timeout:g}s"
        except nats.errors.Error as exc:
            return None, f"{type(exc).__name__}: {exc}"
        if reply.headers and _SERVICE_ERROR in reply.headers:
            return None, f"error reply: {reply.headers[_SERVICE_ERROR]}"
        try:
            return SpendVerdict.model_validate_json(reply.data), ""
        except ValidationError as exc:
            return None, f"unreadable reply: {exc.errors()[0]['msg']}"
