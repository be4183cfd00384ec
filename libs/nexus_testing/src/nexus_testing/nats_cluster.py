"""Three (or `size`) real nats-server nodes in one JetStream cluster for tests, and who leads
what in it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nexus_testing.nats_server import SERVER_START_TIMEOUT, NatsServer
from nexus_testing.polling import eventually, eventually_blocking
from nexus_testing.probes import free_port

if TYPE_CHECKING:
    from nats.js import JetStreamContext


class NatsCluster:
    """`size` real nats-server nodes with JetStream, routed to each other on loopback.

    Each node keeps its ports and store across `kill`/`start`, so clients given `urls`
    reconnect to it and it rejoins with what it stored. Who leads is read from a node's
    monitoring endpoint (``/jsz``): `meta_leader()`, `stream_leader(stream)`,
    `consumer_leader(stream, consumer)`, as node indexes.
    """

    def __init__(self, base: Path, size: int = 3, *, name: str = "nexus") -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        self.name = name
        cluster_ports = [free_port() for _ in range(size)]
        routes = [f"nats://127.0.0.1:{p}" for p in cluster_ports]
        self.nodes = [
            NatsServer(
                base / f"n{i}",
                name=f"n{i}",
                cluster=name,
                cluster_port=cluster_ports[i],
                routes=[r for j, r in enumerate(routes) if j != i],
                monitor_port=free_port(),
            )
            for i in range(size)
        ]

    @property
    def urls(self) -> str:
        """Every node's client URL, comma-joined (`BusSettings.url`)."""
        return ",".join(n.url for n in self.nodes)

    def start(self, node: int | None = None, *, within: float = SERVER_START_TIMEOUT) -> None:
        """Start every node side by side and wait until JetStream is ready on all of them;
        with `node`, start that one again on its ports and store (it rejoins and catches up:
        `wait_ready` waits for that)."""
        if node is not None:
            self.nodes[node].start()
            return
        for n in self.nodes:
            n.spawn()
        for n in self.nodes:
            n.wait_accepting()
        self.wait_ready(within=within)

    def stop(self, *, kill: bool = False) -> None:
        for node in self.nodes:
            node.stop(kill=kill)

    def kill(self, node: int) -> None:
        """SIGKILL one node (``kill -9``): no goodbye to its routes, its store kept."""
        self.nodes[node].stop(kill=True)

    def running(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.running]

    def index(self, server_name: str | None) -> int | None:
        """The node index of a server name (``n0``...), None for None or a stranger."""
        for i, n in enumerate(self.nodes):
            if n.name == server_name:
                return i
        return None

    def _jsz(self, query: str) -> list[dict[str, Any]]:
        answers = []
        for i in self.running():
            status, body = self.nodes[i].monitor(f"/jsz?{query}")
            if status == 200 and isinstance(body, dict):
                answers.append(body)
        return answers

    def meta_leader(self) -> int | None:
        """The node that leads the JetStream meta group, as a running node sees it; None while
        there is none (an election, or no quorum)."""
        for body in self._jsz("leader-only=false"):
            leader = self.index((body.get("meta_cluster") or {}).get("leader"))
            if leader is not None and leader in self.running():
                return leader
        return None

    def stream_leader(self, stream: str) -> int | None:
        """The node that leads `stream` (every account), None while it has no leader."""
        for body in self._jsz("accounts=true&streams=true"):
            for account in body.get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    if detail.get("name") != stream:
                        continue
                    leader = self.index((detail.get("cluster") or {}).get("leader"))
                    if leader is not None and leader in self.running():
                        return leader
        return None

    def consumer_leader(self, stream: str, consumer: str) -> int | None:
        """The node that leads `consumer` of `stream`, None while it has no leader."""
        for body in self._jsz("accounts=true&consumers=true"):
            for account in body.get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    if detail.get("name") != stream:
                        continue
                    for c in detail.get("consumer_detail") or []:
                        if c.get("name") != consumer:
                            continue
                        leader = self.index((c.get("cluster") or {}).get("leader"))
                        if leader is not None and leader in self.running():
                            return leader
        return None

    def healthy(self) -> bool:
        """Every running node answers ``/healthz`` 200: JetStream is enabled, it knows a meta
        leader and its streams are current."""
        running = self.running()
        return bool(running) and all(self.nodes[i].monitor("/healthz")[0] == 200 for i in running)

    def wait_ready(self, *, within: float = SERVER_START_TIMEOUT) -> None:
        """Wait until a meta leader is elected and every running node is healthy."""
        eventually_blocking(
            lambda: self.healthy() and self.meta_leader() is not None,
            within=within,
            interval=0.02,
            what=f"JetStream cluster {self.name} ready",
        )

    async def ensure_streams(self, js: JetStreamContext, *, within: float = 30.0) -> None:
        """Every Nexus stream with as many replicas as there are nodes (retried while the
        young cluster refuses, `streams.ensure_replicated_streams`); then wait until
        NEXUS_RUNS has a leader, since a new replicated stream takes writes only from then."""
        from nexus_events.contract.streams import RUNS, ensure_replicated_streams

        deadline = time.monotonic() + within
        await ensure_replicated_streams(js, len(self.nodes), within)
        await eventually(
            lambda: self.stream_leader(RUNS),
            lambda leader: leader is not None,
            within=max(1.0, deadline - time.monotonic()),
            what="a NEXUS_RUNS leader",
        )
