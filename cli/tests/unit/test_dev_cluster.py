"""`nexus dev up --cluster N` without servers: the size is checked before anything starts,
a stack home keeps the NATS layout its streams were stored in, the nodes' command lines route
to each other, and `dev status` / `dev logs` know a cluster's nodes (issue 27). The cluster
itself runs in tests/e2e/test_cluster_chaos.py."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
from tests.support.cli import invoke as nexus

from nexus_cli.devstack import nats_cluster
from nexus_cli.devstack.state import ServiceEntry, StackState, process_ref, read_state, write_state


@pytest.mark.parametrize("size", ["0", "2", "4", "6", "7", "-1"])
def test_an_even_or_out_of_range_cluster_is_refused_in_one_line(
    env: dict[str, str], size: str
) -> None:
    result = nexus(env, "dev", "up", "--cluster", size)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0] == (
        f"error: --cluster must be 1, 3 or 5 NATS nodes, not {size}: JetStream needs a"
        " majority of an odd number of nodes, and streams have at most 5 replicas"
    )
    assert not (Path(env["NEXUS_DEV_HOME"]) / "logs").exists()  # nothing was started


def test_a_home_keeps_the_nats_layout_its_streams_live_in(env: dict[str, str]) -> None:
    home = Path(env["NEXUS_DEV_HOME"])
    (home / "nats" / "jetstream").mkdir(parents=True)
    result = nexus(env, "dev", "up", "--cluster", "3")
    assert result.exit_code == 2
    assert f"{home / 'nats'} holds the streams of one NATS server, not 3" in result.stderr
    assert "`nexus dev up --cluster 1`, or another --home" in result.stderr
    assert read_state(home) is None  # no supervisor was spawned


def test_store_layout() -> None:
    assert nats_cluster.store_layout(Path("/nonexistent")) is None


def test_store_layout_of_a_cluster(tmp_path: Path) -> None:
    for i in (1, 2, 3):
        (tmp_path / f"nats-{i}" / "jetstream").mkdir(parents=True)
    assert nats_cluster.store_layout(tmp_path) == 3
    (tmp_path / "jetstream").mkdir()
    assert nats_cluster.store_layout(tmp_path) == 1


def test_each_node_routes_to_the_others_on_its_own_ports(tmp_path: Path) -> None:
    nodes = nats_cluster.plan_nodes(3, tmp_path, first_client_port=14222)
    assert [n.client_port for n in nodes] == [14222, 14223, 14224]
    ports = [p for n in nodes for p in (n.client_port, n.cluster_port, n.monitor_port)]
    assert len(set(ports)) == 9
    config = tmp_path / "nats.conf"
    cmd = nats_cluster.node_command("nats-server", config, nodes[1], nodes)
    flags = {a: b for a, b in itertools.pairwise(cmd) if a.startswith("-") and b[0] != "-"}
    assert cmd[0] == "nats-server"
    assert flags["-c"] == str(config)  # the users every node shares
    assert "-js" in cmd
    assert flags["-n"] == "nats-2"
    assert flags["-p"] == "14223"
    assert flags["-sd"] == str(tmp_path / "nats-2")
    assert flags["--cluster_name"] == nats_cluster.CLUSTER_NAME
    assert flags["--cluster"] == f"nats://127.0.0.1:{nodes[1].cluster_port}"
    assert flags["--routes"] == f"{nodes[0].cluster_url},{nodes[2].cluster_url}"
    assert (
        nats_cluster.urls(nodes)
        == "nats://127.0.0.1:14222,nats://127.0.0.1:14223,nats://127.0.0.1:14224"
    )


def _cluster_state(home: Path) -> StackState:
    """A ready stack of three nodes whose processes are this test process (none listens)."""
    home.mkdir(parents=True, exist_ok=True)
    me = process_ref(os.getpid())
    nodes = nats_cluster.plan_nodes(3, home / "nats")
    state = StackState(
        home=str(home),
        status="ready",
        supervisor=me,
        cluster_size=3,
        nats_nodes=nodes,
        nats_url=nats_cluster.urls(nodes),
    )
    for name in (*(n.name for n in nodes), "postgres", "core", "memory", "scheduler"):
        state.services[name] = ServiceEntry(
            name=name, state="running", pid=me.pid, create_time=me.create_time,
            restarts=1 if name == "nats-2" else 0, log=str(home / "logs" / f"{name}.log"),
        )  # fmt: skip
    return state


def test_status_lists_each_node_in_place_of_the_single_server(env: dict[str, str]) -> None:
    home = Path(env["NEXUS_DEV_HOME"])
    state = _cluster_state(home)
    write_state(home, state)
    result = nexus(env, "dev", "status", "-o", "json")
    data = json.loads(result.stdout)
    names = [s["name"] for s in data["services"]]
    assert names[:4] == ["nats-1", "nats-2", "nats-3", "postgres"]
    assert "nats" not in names
    services = {s["name"]: s for s in data["services"]}
    assert services["nats-2"]["restarts"] == 1
    assert services["nats-1"]["health"] == "down"  # nothing listens on its port
    assert data["cluster_size"] == 3
    assert [n["name"] for n in data["nats_nodes"]] == ["nats-1", "nats-2", "nats-3"]
    assert data["nats_nodes"][1]["monitor_url"] == state.nats_nodes[1].monitor_url
    assert data["nats_nodes"][1]["pid"] == os.getpid()


def test_logs_of_a_node(env: dict[str, str]) -> None:
    home = Path(env["NEXUS_DEV_HOME"])
    write_state(home, _cluster_state(home))
    (home / "logs").mkdir(parents=True)
    (home / "logs" / "nats-2.log").write_text("[INF] JetStream cluster new metadata leader\n")
    result = nexus(env, "dev", "logs", "nats-2")
    assert result.exit_code == 0, result.stderr
    assert "new metadata leader" in result.stdout
    unknown = nexus(env, "dev", "logs", "nats-4")
    assert unknown.exit_code == 2
    assert "nats-1, nats-2, nats-3" in unknown.stderr


def test_the_single_server_keeps_its_command_line(tmp_path: Path) -> None:
    # `nexus dev up` without --cluster runs nats-server as before issue 27, with the rendered
    # config (its users) loaded first, so the flags' loopback ports win over the file's.
    config = tmp_path / "nats.conf"
    assert nats_cluster.single_command("nats-server", config, 4222, 8222, tmp_path) == [
        "nats-server", "-c", str(config), "-a", "127.0.0.1", "-p", "4222", "-js",
        "-sd", str(tmp_path), "-m", "8222", "-n", "nexus-dev",
    ]  # fmt: skip
