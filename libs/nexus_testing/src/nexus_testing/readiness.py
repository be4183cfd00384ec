"""A service's readiness through a JetStream meta-leader election on a real cluster."""

from __future__ import annotations

from nexus_events.contract.streams import StorageProblem
from nexus_events.runtime.process import ServiceApp

from nexus_testing.nats_cluster import NatsCluster
from nexus_testing.polling import eventually
from nexus_testing.probes import http_status

ELECTION = 15.0  # most seconds a meta-leader election takes here, as the cluster tests say


async def ready_again_after_an_election(app: ServiceApp, cluster: NatsCluster) -> None:
    """Kill `cluster`'s meta leader under the started `app`: its /readyz must say 200, then
    503 with the probe's reason while JetStream elects, then 200 again; /healthz stays 200
    (the same process, not restarted)."""
    assert app.health is not None
    assert app.jetstream is not None
    port, probe = app.health.port, app.jetstream

    async def readyz() -> int:
        return await http_status(port, "/readyz")

    await eventually(readyz, lambda s: s == 200, within=ELECTION, what="ready at start")
    meta = cluster.meta_leader()
    assert meta is not None
    cluster.kill(meta)

    async def readiness() -> tuple[int, StorageProblem | None]:
        # The status and why, read together: the probe may recover (a new meta leader) a
        # moment after a 503, so the why is taken with the status, not after it.
        return await readyz(), probe.problem

    await eventually(
        readiness,
        lambda r: r[0] == 503 and r[1] is not None,  # not ready, and says why
        within=ELECTION,
        what="not ready, with the reason",
    )
    await eventually(readyz, lambda s: s == 200, within=ELECTION, what="ready again")
    assert await http_status(port, "/healthz") == 200
