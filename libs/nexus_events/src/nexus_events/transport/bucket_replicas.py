"""Brings an existing KV bucket's stream to the replicas in force (NEXUS_STREAMS_REPLICAS),
as `ensure_streams` does for the streams: a bucket created at R1 follows the streams to R3.
Only upwards: a client with the default R1 (the CLI on a laptop) must not shrink a cluster's
R3 bucket; lowering stays an operator's edit (``nats stream edit``).

A bucket is created with the replicas of its first user; without this, one made before the
cluster grew stays on one node, and losing that node stops every lease held in it. The edit
is JetStream's own (a stream update of ``num_replicas``: the new peers catch up from the
leader while the bucket keeps answering). A refused edit (no permission, a single server
that cannot hold R3, a cluster short of nodes) is one warning and the bucket is used as it
is: a lease in an R1 bucket still works, it just does not survive its node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext

log = logging.getLogger(__name__)

# Seconds an edit waits for the bucket's new replica group to elect a leader with every peer
# current: until then its writes time out (measured on a 3-node cluster going R1 -> R3).
SETTLE_WITHIN = 10.0
SETTLE_POLL = 0.1


async def follow_replicas(js: JetStreamContext, stream: str, replicas: int) -> bool:
    """Raise `stream`'s replicas to `replicas` if it has fewer; True if it was edited."""
    try:
        info = await js.stream_info(stream)
        before = info.config.num_replicas or 1
        if before >= replicas:
            return False
        await js.update_stream(dataclasses.replace(info.config, num_replicas=replicas))
    except (nats.errors.Error, nats.js.errors.Error) as exc:
        log.warning("%s keeps its replicas: R%d refused: %s", stream, replicas, exc)
        return False
    log.info("%s: replicas R%d -> R%d (NEXUS_STREAMS_REPLICAS)", stream, before, replicas)
    await _settle(js, stream, replicas)
    return True


async def _settle(js: JetStreamContext, stream: str, replicas: int) -> None:
    """Wait (bounded) until `stream` has a leader and `replicas - 1` current followers, so the
    caller's next write is not the one that times out; past the bound, go on regardless."""
    deadline = time.monotonic() + SETTLE_WITHIN
    while time.monotonic() < deadline:
        try:
            cluster = (await js.stream_info(stream)).cluster
        except (nats.errors.Error, nats.js.errors.Error):
            cluster = None
        peers = [] if cluster is None else cluster.replicas or []
        if (
            cluster is not None
            and cluster.leader is not None
            and len(peers) == replicas - 1
            and all(p.current for p in peers)
        ):
            return
        await asyncio.sleep(SETTLE_POLL)  # a poll period: JetStream announces no settling
    log.info("%s: new replicas not all current after %.0fs; going on", stream, SETTLE_WITHIN)


__all__ = ["follow_replicas"]
