"""``python -m nexus_runner --warm-claim``: a warm Kubernetes pod that waits on its slot's NATS
subject for the one run it serves, claims it atomically and runs it as a cold runner would.

The pod starts with a SLOT credential only (``NEXUS_WARM_SLOT``, user ``warm:<slot>``): it may
read its own slot's hand-offs and answer each once, nothing else (docs/warm-starts.md). The
first `WarmHandoff` it reads is its run: it answers ``accepted``; a later hand-off of that same
run and attempt (a restarted scheduler sending it again) is ``accepted`` too, any other is
``taken``, so no pod ever serves two runs and a scheduler never hands one pod twice unknowingly.
The run's own environment (its NATS credential, ``NEXUS_RUN_ID``, trace context) is then set,
the runner's settings read, and the run goes on exactly as ``--config`` runs it; the slot's
subscription stays open until the run ends so a re-sent hand-off still gets its answer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from nats.aio.client import Client
from nats.aio.msg import Msg
from nexus_events.contract import subjects
from nexus_events.events.warm import WarmClaim, WarmClaimStatus, WarmHandoff
from nexus_events.runtime import telemetry
from nexus_events.runtime.logs import setup_logging
from nexus_events.runtime.process import load_settings
from nexus_events.transport.bus import BusSettings
from nexus_events.transport.connect import connect
from pydantic import ValidationError

from nexus_runner.config import RunnerSettings
from nexus_runner.warm import serve as serve_handoff

log = logging.getLogger(__name__)

SLOT_VARIABLE = "NEXUS_WARM_SLOT"
EXIT_NO_SLOT = 2


class SlotClaim:
    """The pod's one claim: the first hand-off wins, every other is answered from it."""

    def __init__(self) -> None:
        self.handoff: WarmHandoff | None = None
        self.claimed = asyncio.Event()

    def offer(self, handoff: WarmHandoff) -> WarmClaim:
        """Take `handoff` if this pod serves nothing yet; the answer to send either way."""
        if self.handoff is None:
            self.handoff = handoff
            self.claimed.set()
        mine = self.handoff.config
        offered = handoff.config
        same = (mine.run_id, mine.attempt) == (offered.run_id, offered.attempt)
        status = WarmClaimStatus.ACCEPTED if same else WarmClaimStatus.TAKEN
        return WarmClaim(status=status, run_id=mine.run_id, attempt=mine.attempt)


async def listen(nc: Client, slot: str, claim: SlotClaim) -> None:
    """Answer every hand-off of `slot` from `claim` (a malformed one gets no answer: the
    scheduler's request times out and it starts that run cold)."""

    async def on_handoff(msg: Msg) -> None:
        try:
            handoff = WarmHandoff.model_validate_json(msg.data)
        except ValidationError as exc:
            log.warning("warm slot %s: malformed hand-off: %s", slot, str(exc).splitlines()[0])
            return
        answer = claim.offer(handoff)
        if msg.reply:
            await msg.respond(answer.model_dump_json().encode())

    await nc.subscribe(subjects.runner_warm(slot), cb=on_handoff)
    await nc.flush()


async def run_handoff(handoff: WarmHandoff) -> int:
    """Run the claimed run as ``--config`` runs it (its environment set first); 0: completed."""
    os.environ.update(handoff.env)  # the run's own credential, before its settings are read
    settings = load_settings("runner", RunnerSettings)
    setup_logging("runner")
    telemetry.setup_telemetry("runner")
    try:
        return await serve_handoff(handoff, settings)  # as a warm local runner serves it
    finally:
        telemetry.shutdown_telemetry()


async def serve(slot: str) -> int:
    """Wait on `slot` with the slot credential of the environment, then run what was claimed."""
    nc = await connect(BusSettings())
    try:
        claim = SlotClaim()
        await listen(nc, slot, claim)
        await claim.claimed.wait()
        if claim.handoff is None:  # set with the event: never
            return EXIT_NO_SLOT
        return await run_handoff(claim.handoff)
    finally:
        await nc.close()


def main() -> None:
    slot = os.environ.get(SLOT_VARIABLE, "")
    try:
        subjects.validate_token(slot, "warm slot")
    except ValueError as exc:
        print(f"nexus-runner --warm-claim: {SLOT_VARIABLE}: {exc}", file=sys.stderr)
        sys.exit(EXIT_NO_SLOT)
    sys.exit(asyncio.run(serve(slot)))
