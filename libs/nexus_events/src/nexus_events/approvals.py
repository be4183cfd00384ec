"""The first decision on an approval wins, whichever surface makes it (chat, CLI, Plane).

Each surface claims the approval with a NATS KV ``create()`` of the key ``<run>.<approval>``
before it publishes its `ApprovalDecision` on the run's inbox: ``create`` succeeds for exactly
one claimant (compare-and-set on "no such key"), so two people answering at once produce one
decision, and the loser learns who won. A bare ``nats pub`` bypasses the claim; the runner
still takes only the first decision it reads (stream order), so the run sees one answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from nexus_events.subjects import validate_token

# KV bucket of approval claims. Entries outlive any approval (the runner's expiry is minutes
# to hours), and a week keeps the bucket small.
APPROVALS_BUCKET = "nexus_approvals"
CLAIM_TTL_SECONDS = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Claim:
    """Who holds an approval's decision: `won` is True for the caller that made it."""

    won: bool
    decision: str
    decided_by: str | None
    surface: str | None

    def told(self) -> str:
        """The decision as every surface tells it: ``deny by alice via cli``."""
        return decided_as(self.decision, self.decided_by, self.surface)


def decided_as(decision: str, decided_by: str | None, surface: str | None) -> str:
    """``<decision>[ by <who>][ via <surface>]``, the words chat, Plane and the CLI use."""
    by = f" by {decided_by}" if decided_by else ""
    via = f" via {surface}" if surface else ""
    return f"{decision}{by}{via}"


async def approvals_bucket(js: JetStreamContext) -> KeyValue:
    """The claims bucket, created on first use (idempotent across services)."""
    try:
        return await js.key_value(APPROVALS_BUCKET)
    except BucketNotFoundError:
        return await js.create_key_value(bucket=APPROVALS_BUCKET, history=1, ttl=CLAIM_TTL_SECONDS)


def claim_key(run_id: str, approval_id: str) -> str:
    return f"{validate_token(run_id, 'run id')}.{validate_token(approval_id, 'approval id')}"


async def claim_approval(
    js: JetStreamContext,
    run_id: str,
    approval_id: str,
    decision: str,
    *,
    decided_by: str | None,
    surface: str,
    token: str | None = None,
) -> Claim:
    """Claim the decision of one approval; the returned `Claim` says whether the caller won
    and, if not, the decision that did. Raises nats errors if the server is unreachable.

    `token` names the claimant's attempt (e.g. the chat message's dedupe key): claiming again
    with the same token wins again, so a claimant that crashed between its claim and its
    publish finishes the job on redelivery instead of being told it lost to itself.
    """
    kv = await approvals_bucket(js)
    key = claim_key(run_id, approval_id)
    body = {"decision": decision, "decided_by": decided_by, "surface": surface, "token": token}
    try:
        await kv.create(key, json.dumps(body).encode())
    except KeyWrongLastSequenceError:
        entry = await kv.get(key)
        held = json.loads(entry.value or b"{}")
        return Claim(
            won=token is not None and held.get("token") == token,
            decision=str(held.get("decision", "")),
            decided_by=held.get("decided_by"),
            surface=held.get("surface"),
        )
    return Claim(won=True, decision=decision, decided_by=decided_by, surface=surface)


async def release_approval(js: JetStreamContext, run_id: str, approval_id: str) -> None:
    """Give a won claim back (the decision could not be published), so another surface can
    decide; only the winner calls this, and nothing else writes a held key."""
    kv = await approvals_bucket(js)
    await kv.delete(claim_key(run_id, approval_id))
