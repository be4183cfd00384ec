"""deploy/nats/nats.conf: rendered from nexus_events, accepted by the real nats-server, and
each service may publish exactly the subjects the contract gives it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from nexus_events.contract import subjects
from nexus_testing import nats_server_binary

from tests.support.nats_render import issuer_env, load_renderer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def renderer() -> ModuleType:
    return load_renderer()


def test_committed_configs_are_the_rendered_ones(renderer: ModuleType) -> None:
    for path, text in renderer.rendered().items():
        assert path.read_text() == text, f"{path} is stale: run deploy/nats/render.py"


def test_every_node_of_a_cluster_has_the_single_servers_users(renderer: ModuleType) -> None:
    single = renderer.render()
    users = single[single.index("authorization {") :]
    for path, cluster in renderer.OUTPUTS.items():
        text = path.read_text()
        assert text.endswith(users), path
        assert ("cluster {" in text) == (cluster is not None), path


@pytest.mark.parametrize(
    "name", ["nats/nats.conf", "nats/cluster.conf", "k8s/overlays/prod/nats/nats.conf"]
)
def test_nats_server_accepts_the_config(renderer: ModuleType, name: str) -> None:
    users = [*renderer.SERVICES, *renderer.CLIENTS, "admin"]
    env = {**os.environ, **{renderer.password_variable(u): "x" for u in users}}
    env |= issuer_env(renderer)
    # A cluster node's server name comes from its environment.
    env |= {"SERVER_NAME": "nats-0", "NATS_SERVER_NAME": "nats-1"}
    out = subprocess.run(
        [nats_server_binary(), "-c", str(ROOT / "deploy" / name), "-t"],
        env=env, capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_each_service_publishes_only_its_own_subjects(renderer: ModuleType) -> None:
    perms = {name: renderer.permissions(a) for name, a in renderer.SERVICES.items()}
    core_pub, core_sub = perms["core"]
    sched_pub, _ = perms["scheduler"]
    runner_pub, runner_sub = perms["runner"]
    # Only the runner writes logs; only core serves queries; each its own dead letters.
    assert subjects.family_filter(subjects.Family.LOG) in runner_pub
    assert not any(p.startswith("nexus.agent.log") for p in core_pub + sched_pub)
    assert subjects.CORE_RUNS_GET in core_sub
    assert subjects.CORE_RUNS_GET not in runner_sub
    for name, (pub, _) in perms.items():
        dlq = [p for p in pub if p.startswith("nexus.dlq.")]
        assert dlq == [subjects.dead_letter(name)]
        assert ">" not in pub
        assert "$JS.API.>" not in pub
        assert not any(p.startswith("$JS.API.STREAM.DELETE") for p in pub)
    assert subjects.run_events_filter(event="prepared") in core_pub
    assert subjects.run_events_filter(event="prepared") not in sched_pub
    assert subjects.run_events_filter(event="dispatched") in sched_pub
    assert subjects.run_events_filter(event="dispatched") not in core_pub


def test_the_mcp_users_may_read_and_only_operate_may_act(renderer: ModuleType) -> None:
    read_pub, read_sub = renderer.permissions(renderer.CLIENTS["mcp-read"])
    operate_pub, operate_sub = renderer.permissions(renderer.CLIENTS["mcp-operate"])
    requested = subjects.run_event("r1", "requested")
    # A read token's identity asks queries and follows streams; it publishes no event, files
    # no dead letter, claims no approval and writes no memory.
    assert subjects.CORE_RUNS_GET in read_pub
    assert "$JS.API.CONSUMER.CREATE.NEXUS_RUNS" in read_pub
    assert not any(subjects.matches(p, requested) for p in read_pub if not p.startswith("$"))
    assert not any(p.startswith(("nexus.agent.", "nexus.dlq.", "$KV.")) for p in read_pub)
    assert subjects.MEMORY_RECORD not in read_pub
    # operate starts runs and flows, cancels, answers approvals (KV claim, inbox) and records
    # memory through memory's guard: never a memory event itself, nor a stream's deletion.
    assert any(subjects.matches(p, requested) for p in operate_pub)
    assert any(
        subjects.matches(p, subjects.run_event("r1", "cancel_requested")) for p in operate_pub
    )
    assert any(subjects.matches(p, subjects.flow_event("f1", "requested")) for p in operate_pub)
    assert any(subjects.matches(p, subjects.inbox("r1")) for p in operate_pub)
    assert "$KV.nexus_approvals.>" in operate_pub
    assert subjects.MEMORY_RECORD in operate_pub
    assert not any(subjects.matches(p, subjects.run_event("r1", "completed")) for p in operate_pub)
    recorded = subjects.memory_event("global", "recorded")
    assert not any(subjects.matches(p, recorded) for p in operate_pub)
    assert not any(p.startswith("nexus.dlq.") for p in operate_pub)
    for pub, sub in ((read_pub, read_sub), (operate_pub, operate_sub)):
        assert ">" not in pub
        # It creates no Nexus stream (the services do) and serves no query.
        assert not any(
            p.startswith(("$JS.API.STREAM.DELETE", "$JS.API.STREAM.CREATE.NEXUS_")) for p in pub
        )
        assert {s for s in sub if not s.startswith("$JS.EVENT.ADVISORY.")} == {"_INBOX.>"}
    assert set(read_pub) < set(operate_pub)
