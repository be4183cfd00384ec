"""Write the NATS server configs of compose and Kubernetes: what nexus_events.runtime.nats_config renders.

The users, their permissions and the config's text live in `nexus_events.runtime.nats_config` (the dev
stack renders the same text for `nexus dev up`); this script names the files and the cluster
each node joins. Run ``uv run python deploy/nats/render.py`` after a contract change;
tests/deploy fails while the committed files differ from what this renders. Passwords are
never written here: each is an environment variable of the nats-server process
(``$NEXUS_<SERVICE>_NATS_PASSWORD``), which nats-server resolves when it loads the file.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Re-exported: the tests that check the rendered files load this script as their renderer.
from nexus_events.runtime.nats_config import (
    ADMIN,
    ALL_STREAMS,
    AUTH_CALLOUT_ISSUER_VARIABLE,
    AUTH_CALLOUT_SUBJECT,
    CALLOUT_USERS,
    CLIENT_ROLES,
    CLIENTS,
    CLUSTER_PORT,
    LAME_DUCK_DURATION,
    LAME_DUCK_GRACE_PERIOD,
    SERVICES,
    Access,
    Cluster,
    password_variable,
    permissions,
    render,
    table_users,
    users,
)

ROOT = Path(__file__).resolve().parents[2]

# compose: `nats` (the seed node of the single-node stack) and the profile's nats-2, nats-3.
COMPOSE_CLUSTER = Cluster(
    name="nexus",
    routes=tuple(f"nats://{host}:{CLUSTER_PORT}" for host in ("nats", "nats-2", "nats-3")),
    server_name_variable="NATS_SERVER_NAME",
    max_file_store="10G",
)
# Kubernetes prod: StatefulSet `nats`, headless Service `nats-headless` in namespace `nexus`.
# 90G of the 100Gi volume (overlays/prod/nats-storage.yaml): the Raft logs and snapshots of
# the streams' groups live in the same store directory.
K8S_CLUSTER = Cluster(
    name="nexus",
    routes=tuple(f"nats://nats-{i}.nats-headless.nexus.svc:{CLUSTER_PORT}" for i in range(3)),
    server_name_variable="SERVER_NAME",
    max_file_store="90G",
    pid_file="/var/run/nats/nats.pid",
)
# Every rendered file and the cluster its node joins (None: a single server). The single
# server's file serves compose (mounted) and Kubernetes (a kustomize configMapGenerator, which
# only reads files inside its own directory).
OUTPUTS: dict[Path, Cluster | None] = {
    ROOT / "deploy/nats/nats.conf": None,
    ROOT / "deploy/k8s/base/nats/nats.conf": None,
    ROOT / "deploy/nats/cluster.conf": COMPOSE_CLUSTER,
    ROOT / "deploy/k8s/overlays/prod/nats/nats.conf": K8S_CLUSTER,
}

__all__ = [
    "ADMIN", "ALL_STREAMS", "AUTH_CALLOUT_ISSUER_VARIABLE", "AUTH_CALLOUT_SUBJECT",
    "CALLOUT_USERS", "CLIENTS", "CLIENT_ROLES", "CLUSTER_PORT", "COMPOSE_CLUSTER",
    "K8S_CLUSTER", "LAME_DUCK_DURATION", "LAME_DUCK_GRACE_PERIOD", "OUTPUTS", "SERVICES",
    "Access", "Cluster", "password_variable", "permissions", "render", "rendered",
    "table_users", "users",
]  # fmt: skip


def rendered() -> dict[Path, str]:
    """What each file of `OUTPUTS` should hold."""
    return {path: render(cluster) for path, cluster in OUTPUTS.items()}


def main() -> int:
    for path, text in rendered().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
