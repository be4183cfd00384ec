"""Compose without Docker: run core, memory, the scheduler (local runtime), flows, the lab and
spend from compose.yaml's own commands and environments, against a real nats-server started with
deploy/nats/nats.conf (the per-service users and permissions) and a real PostgreSQL, and
drive one run end to end: agent applied -> requested -> prepared -> dispatched -> started ->
completed, the runner being started by the scheduler exactly as NEXUS_LOCAL_COMMAND
says, with the fake OpenAI server as the LLM; then memory extracts what the run learned
(asking the same fake model) and a search finds it, flows and the lab answer a list query on
their own users, and spend's usage shows the run's model calls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events.catalog import AgentApplied, AgentDefinition
from nexus_events.events.evals import EvalListReply, EvalListRequest
from nexus_events.events.flows import FlowsList, FlowsListReply
from nexus_events.events.memory import MemorySearchReply, MemorySearchRequest
from nexus_events.events.runs import RunRequested, TerminalEvent
from nexus_events.events.spend import UsageGroup, UsageLine, UsageQuery, UsageReport
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import eventually, eventually_blocking, free_port, nats_server_binary

from ..fakes.openai_server import FakeOpenAI, Reply, ToolCall
from .compose_model import ROOT, environment, load

# The compose services this test runs as real processes; the others are explained below.
RUN_HERE = {"core", "memory", "scheduler", "flows", "lab", "spend"}
REPLACED = {
    "nats": "run as the test's nats-server with deploy/nats/nats.conf",
    "postgres": "replaced by the embedded PostgreSQL (pgvector) of the test fixtures",
}
NOT_RUN = {
    "mongodb": "profile mongodb is not active (image-only service)",
    "core-mongodb": "profile mongodb is not active",
    "otel-collector": "profile observability; OTEL_EXPORTER_OTLP_ENDPOINT is dropped",
    "prometheus": "image-only service",
    "tempo": "profile observability",
    "grafana": "profile observability",
    "offline-model": "profile test; the test's scripted FakeOpenAI is the model here",
    "plane-sync": "profile plane is not active (needs a Plane; services/plane-sync/tests run it"
    " against tests/fakes/plane.py, make compose-test against fake-plane)",
    "channel-gateway": "profile channels is not active (needs a channel's credentials); its"
    " NATS user is exercised by services/channel-gateway/tests/integration/"
    "test_nats_permissions.py, its Slack round trip by make compose-test",
    "fake-plane": "profile test; make compose-test's fake Plane (tests/fakes/plane.py)",
    "fake-slack": "profile test; make compose-test's fake Slack (tests/fakes/slack_api.py)",
    "console": "its NATS user and pages run on every `nexus dev up` (tests/e2e/"
    "test_console_browser.py drives them in Chromium); make compose-test checks its login page",
    "mcp": "profile mcp (the `nexus` CLI's MCP server); tests/e2e/test_mcp_e2e.py and"
    " test_mcp_inspector.py drive it against the dev stack, make compose-test curls it",
}
RUN_DEADLINE = 90.0


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, within: float = 20) -> None:
    def listening() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        return False

    eventually_blocking(listening, within=within, interval=0.05, what=f"{what} listening on {port}")


@pytest.fixture
def compose() -> dict[str, Any]:
    model = load()
    for name in model["services"]:
        if name in RUN_HERE:
            print(f"compose smoke: running {name} from its compose command and environment")
        elif name in REPLACED:
            print(f"compose smoke: {name}: {REPLACED[name]}")
        else:
            # Explicitly not run, with the reason (an unknown service fails the test instead).
            assert name in NOT_RUN, f"compose service {name} is neither run nor explained"
            print(f"compose smoke: skipping {name}: {NOT_RUN[name]}")
    return model


@pytest.fixture
def compose_nats(compose: dict[str, Any], tmp_path: Path) -> Iterator[tuple[str, int]]:
    """nats-server with compose's config file and the password environment compose gives it."""
    service = compose["services"]["nats"]
    config = ROOT / "deploy" / service["volumes"][0].split(":", 1)[0]
    assert service["command"] == ["-c", "/etc/nats/nats.conf", "-sd", "/data/jetstream"]
    port, monitor = free_port(), free_port()
    env = {**os.environ, **environment(service)}
    log = tmp_path / "nats.log"
    proc = subprocess.Popen(
        [nats_server_binary(), "-c", str(config), "-a", "127.0.0.1", "-p", str(port),
         "-m", str(monitor), "-sd", str(tmp_path / "js"), "-l", str(log)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_port(port, proc, "nats-server")
        yield f"nats://127.0.0.1:{port}", monitor
    finally:
        proc.kill()
        proc.wait(10)
    # Any subject a service needs but its user may not use shows up here: fail on it.
    text = log.read_text() if log.exists() else ""
    violations = [line for line in text.splitlines() if "Violation" in line]
    assert not violations, "\n".join(violations[:20])


class Service:
    """One compose service run as a process: entrypoint + environment from compose."""

    def __init__(self, name: str, spec: dict[str, Any], env: dict[str, str], logs: Path) -> None:
        entry = list(spec["entrypoint"]) + list(spec.get("command", []))
        # `python` in the image is the venv's python here.
        self.argv = [sys.executable if entry[0] == "python" else entry[0], *entry[1:]]
        self.name = name
        self.env = env
        self.log = logs / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=self.log.parent
            )

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def tail(self) -> str:
        return f"--- {self.name} ---\n" + self.log.read_text(errors="replace")[-4000:]


def _base_env() -> dict[str, str]:
    """What a container has besides compose's variables: PATH (the venv first), HOME."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp"),
        "LANG": "C.UTF-8",
    }


def _mapped(
    env: dict[str, str], nats_url: str, pg_dsn: str, llm_url: str, tmp: Path
) -> dict[str, str]:
    """Compose's environment with compose hostnames mapped to the test's servers."""
    out = dict(env)
    out["NEXUS_NATS_URL"] = env["NEXUS_NATS_URL"].replace("nats://nats:4222", nats_url)
    assert out["NEXUS_NATS_URL"] == nats_url, env["NEXUS_NATS_URL"]
    if "NEXUS_DATABASE_URL" in env:
        assert "@postgres:5432/" in env["NEXUS_DATABASE_URL"]
        out["NEXUS_DATABASE_URL"] = pg_dsn  # embedded PostgreSQL listens on a unix socket
    if "NEXUS_HEALTH_PORT" in env:
        out["NEXUS_HEALTH_HOST"] = "127.0.0.1"
        out["NEXUS_HEALTH_PORT"] = str(free_port())
    if "NEXUS_LLM_BASE_URL" in env:
        out["NEXUS_LLM_BASE_URL"] = llm_url
    for key in ("NEXUS_LOCAL_WORKDIR", "NEXUS_WORKSPACE_ROOT"):
        if key in env:
            out[key] = str(tmp / key.lower())
    out.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)  # no collector here (see NOT_RUN)
    return out


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    script = [
        Reply(tool_calls=(ToolCall("write_file", {"path": "hello.txt", "content": "hi"}),)),
        Reply(tool_calls=(ToolCall("finish", {"summary": "wrote hello"}),)),
        # Memory's extraction, asked once the run has completed.
        Reply(text=json.dumps({"memories": [{"text": LEARNED, "kind": "fact"}]})),
    ]
    async with FakeOpenAI(script) as server:
        yield server


async def _run_events(bus: Bus, run_id: str) -> list[str]:
    return [d.address.event or "" async for d in bus.replay(RUNS, run_id=run_id)]


async def test_one_run_end_to_end_from_compose(
    compose: dict[str, Any],
    compose_nats: tuple[str, int],
    pg_dsn: str,
    llm: FakeOpenAI,
    tmp_path: Path,
) -> None:
    nats_url, monitor = compose_nats
    services = compose["services"]
    nats_env = environment(services["nats"])
    procs = {
        name: Service(
            name,
            services[name],
            {
                **_base_env(),
                **_mapped(environment(services[name]), nats_url, pg_dsn, llm.base_url, tmp_path),
            },
            tmp_path,
        )
        for name in ("core", "memory", "scheduler", "flows", "lab", "spend")
    }
    admin = await Bus.connect(
        BusSettings(
            url=nats_url,
            user="admin",
            password=nats_env["NEXUS_ADMIN_NATS_PASSWORD"],
            connect_attempts=2,
        ),
        source="operator",
    )
    run_id = f"run-{uuid.uuid4().hex[:10]}"
    events: list[str] = []
    try:
        core = procs["core"]
        core.start()
        health = int(core.env["NEXUS_HEALTH_PORT"])
        await _until_ready(core, health)
        memory = procs["memory"]
        memory.start()
        await _until_ready(memory, int(memory.env["NEXUS_HEALTH_PORT"]), within=60)
        scheduler = procs["scheduler"]
        scheduler.start()
        await _until_ready(scheduler, int(scheduler.env["NEXUS_HEALTH_PORT"]))
        # Flows: ready once its consumers on NEXUS_FLOWS, NEXUS_RUNS, NEXUS_INBOX and
        # NEXUS_CHANNELS exist, each created with the `flows` user's permissions.
        flows = procs["flows"]
        flows.start()
        await _until_ready(flows, int(flows.env["NEXUS_HEALTH_PORT"]))
        # The lab: ready once its projection of NEXUS_CATALOG and NEXUS_EVALS, its lease and
        # its NEXUS_RUNS consumer exist, each with the `lab` user's permissions.
        lab = procs["lab"]
        lab.start()
        await _until_ready(lab, int(lab.env["NEXUS_HEALTH_PORT"]))
        # Spend: ready once its projection, its lease and the consumer of budget decisions
        # exist with the `spend` user's permissions; runners reserve through it.
        spend = procs["spend"]
        spend.start()
        await _until_ready(spend, int(spend.env["NEXUS_HEALTH_PORT"]))
        agent = AgentDefinition.model_validate(
            {
                "id": "smoke",
                "role": "implementer",
                "model": {"name": "gpt-4o-mini"},  # base_url from NEXUS_LLM_BASE_URL
                "system_prompt": "You write files.",
                "tools": ["write_file", "finish"],
            }
        )
        await admin.publish(
            subjects.catalog_event("agent", "smoke", "applied"), AgentApplied(definition=agent)
        )
        await admin.publish(
            subjects.run_event(run_id, "requested"),
            RunRequested(agent_id="smoke", input="write hello.txt"),
        )
        deadline = time.monotonic() + RUN_DEADLINE
        while time.monotonic() < deadline:
            events = await _run_events(admin, run_id)
            if any(e in TERMINAL for e in events):
                break
            for p in procs.values():
                assert p.proc is not None, p.name
                assert p.proc.poll() is None, p.tail()
            await asyncio.sleep(0.2)
        detail = "\n".join(p.tail() for p in procs.values()) + _runner_log(tmp_path, run_id)
        for step in ("requested", "prepared", "dispatched", "started", "completed"):
            assert step in events, f"{step} missing from {events}\n{detail}"
        assert events.index("prepared") < events.index("dispatched") < events.index("started")
        last = [d.event async for d in admin.replay(RUNS, run_id=run_id)][-1]
        assert isinstance(last, TerminalEvent), detail
        assert last.reason == "succeeded", detail
        # Memory extracted the run's lesson through the same model; the operator finds it.
        found = await _memory_finds(admin, "where do greeting files live", "agent:smoke", memory)
        assert [i.text for i in found.items] == [LEARNED], detail + memory.tail()
        # The runner's two turns, then memory's extraction: each talked to the fake LLM.
        assert len(llm.requests) == 3
        # Flows serves its queries on its own user (subscribe and allow_responses).
        listed = await admin.nc.request(
            subjects.FLOWS_LIST, FlowsList().model_dump_json().encode(), timeout=5
        )
        assert FlowsListReply.model_validate_json(listed.data).flows == [], flows.tail()
        evals = await admin.nc.request(
            subjects.LAB_EVALS_LIST, EvalListRequest().model_dump_json().encode(), timeout=5
        )
        assert EvalListReply.model_validate_json(evals.data).evals == [], lab.tail()
        # Spend folded the run's two model calls, answering on its own user.
        usage = await eventually(
            lambda: _usage_of(admin, run_id),
            until=lambda line: line is not None and line.turns == 2,
            what="the run's usage",
        )
        assert usage is not None, spend.tail()
        # Each process used its own NATS user; the run process its run's own (the auth
        # callout's user run:<run_id>), not the scheduler's nor a shared runner user.
        users = await asyncio.to_thread(_users, monitor)
        assert {"core", "memory", "scheduler", "flows", "lab", "spend", "admin"} <= users, users
        assert {u for u in users if u.startswith("run:")} == {f"run:{run_id}"}, users
        assert "runner" not in users
    finally:
        await admin.close()
        codes = {name: p.stop() for name, p in reversed(procs.items())}
    # Each drained and exited cleanly on SIGTERM, as `docker compose stop` would ask.
    assert codes == {"spend": 0, "lab": 0, "flows": 0, "scheduler": 0, "memory": 0, "core": 0}, (
        "\n".join(p.tail() for p in procs.values())
    )


TERMINAL = {"completed", "failed", "cancelled", "timed_out", "lost"}


async def _usage_of(bus: Bus, run_id: str) -> UsageLine | None:
    query = UsageQuery(by=UsageGroup.RUN)
    reply = await bus.nc.request(subjects.SPEND_USAGE, query.model_dump_json().encode(), timeout=5)
    report = UsageReport.model_validate_json(reply.data)
    return next((line for line in report.rows if line.key == run_id), None)


LEARNED = "Greeting files live at the repository root as hello.txt"


async def _memory_finds(bus: Bus, query: str, scope: str, memory: Service) -> MemorySearchReply:
    """Memory's search reply once it lists something (extraction runs after the run ends)."""
    request = MemorySearchRequest(query=query, scopes=[scope])
    deadline = time.monotonic() + RUN_DEADLINE
    while True:
        assert memory.proc is not None
        assert memory.proc.poll() is None, memory.tail()
        msg = await bus.nc.request(
            subjects.MEMORY_SEARCH, request.model_dump_json().encode(), timeout=5
        )
        reply = MemorySearchReply.model_validate_json(msg.data)
        if reply.items or time.monotonic() > deadline:
            return reply
        await asyncio.sleep(0.2)


async def _until_ready(service: Service, port: int, within: float = 30) -> None:
    async def ready() -> bool:
        assert service.proc is not None
        assert service.proc.poll() is None, service.tail()
        try:
            status = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/readyz")
        except OSError:
            status = 0
        return status == 200

    await eventually(
        ready, within=within, interval=0.1, what=f"{service.name} ready", detail=service.tail
    )


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=1) as resp:
        status: int = resp.status
        return status


def _users(monitor: int) -> set[str]:
    url = f"http://127.0.0.1:{monitor}/connz?state=all&auth=true&limit=1000"
    with urllib.request.urlopen(url, timeout=2) as resp:
        conns = json.load(resp)["connections"]
    return {c.get("authorized_user", "") for c in conns}


def _runner_log(tmp: Path, run_id: str) -> str:
    path = tmp / "nexus_scheduler_local_workdir" / run_id / "runner.log"
    return f"\n--- runner ---\n{path.read_text()[-4000:]}" if path.exists() else "\n(no runner log)"
