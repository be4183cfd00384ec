"""`nexus dev status` and `nexus dev logs` over a state file (no servers): every service the
supervisor recorded is listed, with its state, pid and restarts (issue 23, defect 6)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.cli import invoke as nexus

from nexus_cli.devstack.state import ServiceEntry, StackState, process_ref, write_state

# What a supervisor with Plane and a channel configured records (supervisor.APP_SERVICES).
RECORDED = (
    "nats", "postgres", "core", "memory", "scheduler", "flows", "plane-sync", "channel-gateway",
    "console", "lab", "spend",
)  # fmt: skip


def _stack(home: Path) -> StackState:
    """A ready stack whose supervisor is this test process (alive, same start time)."""
    home.mkdir(parents=True, exist_ok=True)
    me = process_ref(os.getpid())
    state = StackState(home=str(home), status="ready", supervisor=me)
    for i, name in enumerate(RECORDED):
        state.services[name] = ServiceEntry(
            name=name,
            state="restarting" if name == "plane-sync" else "running",
            pid=me.pid,
            create_time=me.create_time,
            restarts=i,
            last_exit_code=1 if i else None,
            log=str(home / "logs" / f"{name}.log"),
        )
    return state


def test_status_lists_every_supervised_service_with_restarts(env: dict[str, str]) -> None:
    home = Path(env["NEXUS_DEV_HOME"])
    write_state(home, _stack(home))
    result = nexus(env, "dev", "status", "-o", "json")
    services = {s["name"]: s for s in json.loads(result.stdout)["services"]}
    assert list(services) == list(RECORDED)
    assert services["memory"]["restarts"] == RECORDED.index("memory")
    assert services["plane-sync"]["restarts"] == RECORDED.index("plane-sync")
    assert services["plane-sync"]["state"] == "restarting"
    assert services["plane-sync"]["last_exit_code"] == 1
    assert services["channel-gateway"]["pid"] == os.getpid()
    table = nexus(env, "dev", "status")
    for name in RECORDED:
        assert name in table.stdout


def test_status_leaves_out_services_the_stack_did_not_start(env: dict[str, str]) -> None:
    home = Path(env["NEXUS_DEV_HOME"])
    state = _stack(home)
    del state.services["plane-sync"]
    write_state(home, state)
    result = nexus(env, "dev", "status", "-o", "json")
    names = [s["name"] for s in json.loads(result.stdout)["services"]]
    # The gateway runs on every dev stack (delegation); plane-sync only with Plane configured.
    assert names == [
        "nats", "postgres", "core", "memory", "scheduler", "flows", "channel-gateway", "console",
        "lab", "spend",
    ]  # fmt: skip


def test_logs_of_every_supervised_service(env: dict[str, str]) -> None:
    home = Path(env["NEXUS_DEV_HOME"])
    (home / "logs").mkdir(parents=True)
    for name in ("memory", "plane-sync", "channel-gateway"):
        (home / "logs" / f"{name}.log").write_text(f"{name} says hello\n")
        result = nexus(env, "dev", "logs", name)
        assert result.exit_code == 0, result.stderr
        assert f"{name} says hello" in result.stdout


def test_a_crashed_services_exception_line_is_named(tmp_path: Path) -> None:
    from nexus_cli.devstack.supervisor import _last_line

    log = tmp_path / "plane-sync.log"
    log.write_text("x" * 10_000 + "\nTraceback (most recent call last):\n  File ...\n"
                   "OSError: [Errno 98] address already in use\n\n")  # fmt: skip
    assert _last_line(log) == "OSError: [Errno 98] address already in use"
    assert _last_line(tmp_path / "missing.log") == ""
