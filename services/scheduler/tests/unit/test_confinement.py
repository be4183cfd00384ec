"""Confinement: the endpoints and the decision (pure), then a real sandbox built by the same
command line as a runner's, probed from inside by tests/confinement_probe.py."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nexus_events.events import RunConfig
from nexus_scheduler.runtime.confinement import (
    Confinement,
    ConfinementUnavailableError,
    Decision,
    Endpoint,
    decide,
    probe,
    resolve,
    runner_endpoints,
    runner_import_paths,
)
from nexus_scheduler.runtime.runner_env import runner_env

from tests.fakes.openai_server import FakeOpenAI

PROBE = Path(__file__).resolve().parents[1] / "confinement_probe.py"


def _config(**overrides: Any) -> RunConfig:
    body: dict[str, Any] = {
        "run_id": "run-c1",
        "agent_id": "a",
        "system_prompt": "s",
        "input": "i",
        "model": {"name": "m"},
        **overrides,
    }
    return RunConfig.model_validate(body)


def test_endpoints_are_nats_the_model_the_git_remote_github_and_otlp() -> None:
    config = _config(
        model={"name": "m", "base_url": "https://llm.example:8443/v1"},
        repo={"url": "git@github.com:acme/app.git"},
    )
    env = {
        "NEXUS_NATS_URL": "nats://127.0.0.1:4222,tls://nats.internal",
        "NEXUS_GITHUB_TOKEN": "t",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
    }
    assert runner_endpoints(config, env) == [
        Endpoint("127.0.0.1", 4222),
        Endpoint("nats.internal", 4222),
        Endpoint("llm.example", 8443),
        Endpoint("github.com", 22),
        Endpoint("api.github.com", 443),
        Endpoint("collector", 4318),
    ]


def test_exact_egress_grants_are_endpoints_of_the_runner_and_wildcards_are_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = _config(
        model={"name": "m", "base_url": "https://llm.example/v1"},
        egress=[
            {"host": "pypi.org"},
            {"host": "*.pythonhosted.org"},
            {"host": "llm.example"},
            {"host": "mirror.internal", "port": 3141},
        ],
    )
    assert runner_endpoints(config, {})[1:] == [
        Endpoint("llm.example", 443),
        Endpoint("pypi.org", 80),
        Endpoint("pypi.org", 443),
        Endpoint("llm.example", 80),
        Endpoint("mirror.internal", 3141),
    ]
    assert "*.pythonhosted.org cannot be relayed" in caplog.text


def test_endpoint_defaults_and_local_remotes_need_no_network() -> None:
    config = _config(repo={"url": "/srv/git/app.git"})
    env = {"NEXUS_LLM_BASE_URL": "http://localhost:11434/v1"}
    assert runner_endpoints(config, env) == [
        Endpoint("127.0.0.1", 4222),
        Endpoint("localhost", 11434),
    ]
    https = _config(repo={"url": "https://git.example/a.git"})
    assert runner_endpoints(https, {})[1:] == [
        Endpoint("api.openai.com", 443),
        Endpoint("git.example", 443),
    ]


def test_host_names_get_loopback_aliases_and_bare_ips_are_left_out(tmp_path: Path) -> None:
    argv = Confinement("bwrap", readable=()).wrap(
        ["runner"],
        run_dir=tmp_path,
        writable=[tmp_path / "ws"],
        endpoints=[
            Endpoint("127.0.0.1", 4222),
            Endpoint("llm.example", 443),
            Endpoint("git.example", 443),
            Endpoint("10.1.2.3", 4222),
            Endpoint("localhost", 4222),  # the same listener as 127.0.0.1:4222
        ],
    )
    split = [i for i, a in enumerate(argv) if a == "--"]
    outer = argv[argv.index("outer") + 2 : split[0]]
    inner = argv[argv.index("inner") + 2 : split[2]]
    assert outer == ["e0=127.0.0.1:4222", "e1=llm.example:443", "e2=git.example:443"]
    assert inner == ["e0=127.0.0.1:4222", "e1=127.0.1.1:443", "e2=127.0.1.2:443"]
    hosts = (tmp_path / "hosts").read_text().splitlines()
    assert hosts == ["127.0.0.1\tlocalhost", "127.0.1.1\tllm.example", "127.0.1.2\tgit.example"]
    assert argv[split[2] + 1 :] == ["runner"]
    assert "--clearenv" not in argv  # the env is the process's, never argv (ps shows argv)


def test_decide_off_missing_broken_and_not_linux() -> None:
    assert not decide("off").enabled
    missing = decide("auto", which=lambda _: None, platform="linux")
    assert not missing.enabled
    assert "not installed" in missing.reason
    broken = decide("auto", which=lambda _: "/b", check=lambda _: "no userns", platform="linux")
    assert broken == Decision(False, "unavailable: no userns")
    mac = decide("auto", which=lambda _: "/b", check=lambda _: None, platform="darwin")
    assert "Linux" in mac.reason
    works = decide("on", which=lambda _: "/b", check=lambda _: None, platform="linux")
    assert works.enabled
    assert works.bwrap == "/b"


def test_on_refuses_when_unavailable_and_off_warns(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfinementUnavailableError, match="NEXUS_CONFINEMENT=on but"):
        resolve("on", Decision(False, "unavailable: bwrap is not installed"))
    assert not resolve("off").enabled
    assert "NOT confined" in caplog.text


def test_bwrap_works_here() -> None:
    """CI installs bubblewrap (make setup); a machine where it cannot work fails here, with
    the reason, instead of quietly testing nothing below."""
    bwrap = shutil.which("bwrap")
    assert bwrap, "bwrap is not installed: run `make setup` (apt-get install bubblewrap)"
    assert probe(bwrap) is None


@pytest.fixture
def forbidden_port() -> Iterator[int]:
    """A listener on the host's 127.0.0.1 that is neither NATS nor the model."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        yield srv.getsockname()[1]


async def test_a_sandboxed_process_reaches_only_nats_and_the_model(
    nats_url: str, forbidden_port: int, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("elsewhere") / "secret.txt"
    outside.write_text("outside-the-workspace")
    run_dir, workspace = tmp_path / "run", tmp_path / "ws"
    run_dir.mkdir()
    parent = {"PATH": "/usr/bin:/bin", "DEPLOY_TOKEN": "hunter2", "NEXUS_NATS_URL": nats_url}
    env = runner_env(parent, run_dir / "home")
    async with FakeOpenAI([]) as llm:
        config = _config(model={"name": "m", "base_url": llm.base_url})
        nats_port = nats_url.rsplit(":", 1)[1]
        llm_port = llm.base_url.split(":")[2].split("/")[0]
        argv = Confinement(shutil.which("bwrap") or "bwrap").wrap(
            [
                sys.executable,
                "-I",
                str(PROBE),
                f"read={outside}",
                f"read={PROBE}",
                f"write={workspace}/made",
                f"write={run_dir}/config.json",
                f"connect=127.0.0.1:{nats_port}",
                f"connect=127.0.0.1:{llm_port}",
                f"connect=127.0.0.1:{forbidden_port}",
            ],
            run_dir=run_dir,
            writable=[workspace, run_dir / "home"],
            endpoints=runner_endpoints(config, env),
            readable=[PROBE],  # a checkout under a hidden /tmp: bound back, as runners' are
        )
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    report = json.loads(out)
    assert report[f"read={outside}"] == "FileNotFoundError"  # another temp dir: not there
    assert report[f"read={PROBE}"].startswith("ok:")  # the read-only host
    assert report[f"write={workspace}/made"] == "ok"
    assert (workspace / "made").read_text() == "x"
    assert report[f"write={run_dir}/config.json"] == "OSError"  # EROFS: the run dir is not its
    assert report[f"connect=127.0.0.1:{nats_port}"].startswith("ok:INFO ")
    assert report[f"connect=127.0.0.1:{llm_port}"].startswith("ok:HTTP/1.")
    assert report[f"connect=127.0.0.1:{forbidden_port}"] == "ConnectionRefusedError"
    assert "DEPLOY_TOKEN" not in report["env"]
    assert report["home"] == str(run_dir / "home")
    # Only CAP_NET_BIND_SERVICE (bit 10), for the relays, and CAP_SETFCAP (bit 31), for the
    # tools' nested sandbox: even where the tests run as root.
    assert int(report["caps"], 16) == (1 << 10) | (1 << 31)


GRACEFUL = """
import signal, socket, sys, time
def stop(*_):
    with socket.create_connection(("127.0.0.1", {port}), timeout=5) as conn:
        greeting = conn.recv(4)
    with open({out!r}, "w") as fh:
        fh.write("stopped after SIGTERM, NATS said " + greeting.decode())
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(60)
"""


async def test_sigterm_to_the_group_reaches_the_runner_and_its_network_stays(
    nats_url: str, tmp_path: Path
) -> None:
    """The runtime's cancel signals the process group: the runner must get it and still reach
    NATS while it stops (bwrap alone would die of it and take the sandbox along)."""
    workspace, run_dir = tmp_path / "ws", tmp_path / "run"
    run_dir.mkdir()
    port = int(nats_url.rsplit(":", 1)[1])
    script = GRACEFUL.format(port=port, out=str(workspace / "stopped"))
    argv = Confinement(shutil.which("bwrap") or "bwrap").wrap(
        [sys.executable, "-I", "-c", script],
        run_dir=run_dir,
        writable=[workspace],
        endpoints=[Endpoint("127.0.0.1", port)],
    )
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env={"PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"ready\n"
    os.killpg(proc.pid, signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert (workspace / "stopped").read_text() == "stopped after SIGTERM, NATS said INFO"


async def test_a_run_dir_deeper_than_a_unix_socket_path_still_relays(
    nats_url: str, tmp_path: Path
) -> None:
    """The relays' sockets live in the run dir; under a deep NEXUS_LOCAL_WORKDIR their full
    paths pass the 107-byte limit of a unix socket address (the runner then died with exit 125,
    `AF_UNIX path too long`, before its first event)."""
    run_dir = tmp_path / ("deep" * 12) / "nexus_local_workdir" / "run-b70d9a0b7e"
    run_dir.mkdir(parents=True)
    assert len(str(run_dir / "net" / "ctl.sock")) > 107
    port = int(nats_url.rsplit(":", 1)[1])
    reach = (
        "import socket\n"
        f"with socket.create_connection(('127.0.0.1', {port}), timeout=5) as c:\n"
        "    print(c.recv(4).decode())"
    )
    argv = Confinement(shutil.which("bwrap") or "bwrap").wrap(
        [sys.executable, "-I", "-c", reach],
        run_dir=run_dir,
        writable=[tmp_path / "ws"],
        endpoints=[Endpoint("127.0.0.1", port)],
    )
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env={"PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "INFO"


def test_only_what_the_runner_needs_is_shown_again_under_hidden_dirs(tmp_path: Path) -> None:
    home = Path.home()
    venv = home / "venv"
    (tmp_path / "run").mkdir()
    argv = Confinement("bwrap", readable=(home, venv, venv / "lib", Path("/usr/lib"))).wrap(
        ["runner"], run_dir=tmp_path / "run", writable=[tmp_path / "ws"], endpoints=[]
    )
    shown = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    assert str(home) not in shown  # the home stays hidden, whatever sys.path holds
    assert str(venv) in shown
    assert str(venv / "lib") not in shown  # covered by the venv
    assert "/usr/lib" not in shown  # not hidden: the read-only host has it
    assert str((tmp_path / "run").resolve()) in shown  # /tmp is hidden, the run dir is not
    assert ["--bind", str(tmp_path / "ws"), str(tmp_path / "ws")] == argv[
        argv.index("--bind") : argv.index("--bind") + 3
    ]


def test_a_run_sees_no_other_run_wherever_the_roots_are(tmp_path: Path) -> None:
    roots = tmp_path / "srv"
    run_dir = roots / "run-dirs" / "run-c1"
    run_dir.mkdir(parents=True)
    env = {"NEXUS_WORKSPACE_ROOT": str(roots / "ws"), "HOME": str(run_dir / "home")}
    config = _config(repo={"url": str(tmp_path / "origin.git")})
    (tmp_path / "origin.git").mkdir()
    argv = Confinement("bwrap", readable=()).wrap_run(["runner"], config, env, run_dir)
    mounts = [(argv[i], argv[i + 1]) for i, a in enumerate(argv) if a.startswith("--")]
    hidden = [path for flag, path in mounts if flag == "--tmpfs"]
    assert str(roots / "ws") in hidden  # the other runs' workspaces
    assert str(roots / "run-dirs") in hidden  # and their run dirs, configs, logs
    binds = [path for flag, path in mounts if flag == "--bind"]
    assert binds == [
        str(roots / "ws" / "run-c1"),
        str(roots / "ws" / "run-c1.home"),
        str(run_dir / "home"),
        str(tmp_path / "origin.git"),  # a local remote is pushed to
    ]
    assert ("--ro-bind", str(run_dir)) in mounts
    first_bind = argv.index("--bind")
    assert all(argv.index(path) < first_bind for path in hidden)  # hidden, then shown again


async def test_the_scheduler_will_not_start_unconfined_when_on(tmp_path: Path) -> None:
    from nexus_events.runtime.process import EXIT_BAD_SETTINGS

    env = {"PATH": str(tmp_path), "NEXUS_CONFINEMENT": "on", "HOME": str(tmp_path)}  # no bwrap
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nexus_scheduler", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == EXIT_BAD_SETTINGS
    assert err.decode().strip().splitlines()[-1] == (
        "scheduler: NEXUS_CONFINEMENT=on but unavailable: bwrap is not installed"
        " (apt-get install bubblewrap)"
    )


def test_the_runner_reads_its_interpreter_and_packages_never_the_stack_home(
    tmp_path: Path,
) -> None:
    stack = tmp_path / "stack"  # the scheduler's cwd: the stack home, every run dir under it
    site = tmp_path / "venv" / "lib" / "site-packages"
    src = tmp_path / "checkout" / "services" / "runner" / "src"  # an editable install
    for path in (stack / "runs" / "run-x", site, src):
        path.mkdir(parents=True)
    found = runner_import_paths(
        prefixes=[str(tmp_path / "venv")],
        import_path=["", str(stack), str(tmp_path), "/", str(site), str(src), "relative"],
        cwd=stack,
    )
    assert found == (tmp_path / "venv", site, src)


def test_var_tmp_is_hidden_like_tmp(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    argv = Confinement("bwrap", readable=()).wrap(
        ["runner"], run_dir=tmp_path / "run", writable=[], endpoints=[]
    )
    hidden = [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert {"/tmp", "/var/tmp"} <= set(hidden)


def test_an_mcp_server_under_a_hidden_path_is_shown_read_only(tmp_path: Path) -> None:
    run_dir = tmp_path / "run-dirs" / "run-c1"
    run_dir.mkdir(parents=True)
    tool_bin = tmp_path / "home" / ".local" / "bin"  # under /tmp here: hidden in the sandbox
    tool_bin.mkdir(parents=True)
    (tool_bin / "mcp-server-x").write_text("#!/bin/sh\n")
    (tool_bin / "mcp-server-x").chmod(0o755)
    env = {
        "NEXUS_WORKSPACE_ROOT": str(tmp_path / "ws"),
        "HOME": str(run_dir / "home"),
        "NEXUS_MCP_PATH": f"{tool_bin}:/usr/bin",
    }
    config = _config(mcp_servers=[{"name": "x", "command": "mcp-server-x", "tools": ["*"]}])
    argv = Confinement("bwrap", readable=()).wrap_run(["runner"], config, env, run_dir)
    mounts = [(argv[i], argv[i + 1]) for i, a in enumerate(argv) if a.startswith("--")]
    assert ("--ro-bind", str(tool_bin)) in mounts
    assert ("--bind", str(tool_bin)) not in mounts
    assert ("--ro-bind", str(tmp_path / "home")) not in mounts  # only what it needs
