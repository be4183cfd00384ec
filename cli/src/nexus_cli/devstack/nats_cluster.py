"""The dev stack's NATS as a JetStream cluster on loopback (`nexus dev up --cluster N`).

N nats-server processes, named nats-1..N, in one cluster (`CLUSTER_NAME`): each listens for
clients, for routes from the others and for monitoring on its own 127.0.0.1 ports, routes to
every other node, and keeps its JetStream store under HOME/nats/<name>. Every node loads the
same config (HOME/nats/nats.conf, `dev_cluster`): the users of the single server's. The ports
are drawn once, when the stack starts, and a node the supervisor restarts gets the same
command line (same ports, same store), so it rejoins the cluster and catches its stream
replicas up.
Nothing here is Nexus's own clustering: it is how nats-server clusters (routes + a RAFT meta
group for JetStream), as the official Helm chart configures it.
"""

from __future__ import annotations

from pathlib import Path

from nexus_events.runtime.nats_config import Cluster

from nexus_cli.devstack import nats_auth, probes
from nexus_cli.devstack.state import NatsNode

CLUSTER_NAME = "nexus-dev"
# JetStream's meta group and every R>1 stream need a majority of their peers: an even count
# adds a node without adding a failure it survives, and nats-server caps replicas at 5.
MAX_NODES = 5


def cluster_size_error(size: int) -> str | None:
    """Why `size` nodes is not a cluster the dev stack runs, or None if it is."""
    if size < 1 or size > MAX_NODES or size % 2 == 0:
        return (
            f"--cluster must be 1, 3 or 5 NATS nodes, not {size}: JetStream needs a majority of"
            " an odd number of nodes, and streams have at most 5 replicas"
        )
    return None


def plan_nodes(size: int, nats_home: Path, first_client_port: int | None = None) -> list[NatsNode]:
    """`size` nodes with free ports (client ports from `first_client_port` on, if given) and
    their stores under `nats_home`."""
    return [
        NatsNode(
            name=f"nats-{i}",
            client_port=first_client_port + i - 1 if first_client_port else probes.free_port(),
            cluster_port=probes.free_port(),
            monitor_port=probes.free_port(),
            store=str(nats_home / f"nats-{i}"),
        )
        for i in range(1, size + 1)
    ]


def dev_cluster(nodes: list[NatsNode]) -> Cluster:
    """The cluster block of the nodes' config (nexus_events.runtime.nats_config renders it as
    compose's cluster.conf): the users of a single server, a route to every node (a node ignores its
    own), each node's server name from its environment."""
    return Cluster(
        name=CLUSTER_NAME,
        routes=tuple(node.cluster_url for node in nodes),
        server_name_variable=nats_auth.SERVER_NAME_VARIABLE,
        max_file_store="10G",
    )


def single_command(
    binary: str, config: Path, port: int, monitor_port: int, store: Path
) -> list[str]:
    """The command line of the dev stack's one nats-server (no cluster). The flags override
    the rendered config's ports (4222, 8222: compose's) with the stack's loopback ones."""
    return [binary, "-c", str(config), "-a", "127.0.0.1", "-p", str(port), "-js",
            "-sd", str(store), "-m", str(monitor_port), "-n", "nexus-dev"]  # fmt: skip


def node_command(binary: str, config: Path, node: NatsNode, nodes: list[NatsNode]) -> list[str]:
    """The nats-server command line of `node` in the cluster of `nodes`, loading `config`
    (`dev_cluster`'s) for its users; the flags set its own ports, name and routes."""
    routes = ",".join(other.cluster_url for other in nodes if other.name != node.name)
    return [
        binary,
        "-c",
        str(config),
        "-a",
        "127.0.0.1",
        "-p",
        str(node.client_port),
        "-js",
        "-sd",
        node.store,
        "-m",
        str(node.monitor_port),
        # JetStream in a cluster needs a stable server name: the RAFT peers are named after it.
        "-n",
        node.name,
        "--cluster_name",
        CLUSTER_NAME,
        "--cluster",
        node.cluster_url,
        "--routes",
        routes,
    ]


def urls(nodes: list[NatsNode]) -> str:
    """Every node's client URL, comma-joined (what NEXUS_NATS_URL takes)."""
    return ",".join(node.url for node in nodes)


def store_layout(nats_home: Path) -> int | None:
    """How many NATS nodes the stores under `nats_home` belong to: 1 for a single server's,
    N for a cluster's nats-1..N, None if there is no store yet."""
    if (nats_home / "jetstream").exists():
        return 1
    nodes = [p for p in nats_home.glob("nats-*") if (p / "jetstream").exists()]
    return len(nodes) or None


async def meta_leader(nodes: list[NatsNode]) -> str | None:
    """The node leading the JetStream meta group, as the first node that answers knows it
    (its /jsz), or None if none answers or no leader is elected."""
    for node in nodes:
        jsz = await probes.http_json(node.monitor_url + "/jsz")
        meta = jsz.get("meta_cluster") if jsz else None
        if isinstance(meta, dict) and meta.get("leader"):
            return str(meta["leader"])
    return None


async def formed(nodes: list[NatsNode]) -> bool:
    """Whether every node answers /healthz (JetStream current with the meta group) and a
    meta leader is elected: the cluster can take a replicated stream."""
    for node in nodes:
        if await probes.http_status(node.monitor_url + "/healthz") != 200:
            return False
    return await meta_leader(nodes) is not None
