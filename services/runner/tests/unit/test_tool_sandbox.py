"""The tools' own sandbox (nexus_runner.tool_sandbox): its command line, its environment,
the mode's decision, and real commands through run_shell in real bubblewrap (unconfined
here, so with a /proc of their own): what they cannot reach, what still works, and that a
timeout or a cancellation takes the whole sandbox down."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from nexus_events.events.specs import McpServerSpec, Permissions, ToolGrant
from nexus_testing import eventually

from nexus_runner.config import RunnerSettings
from nexus_runner.errors import ToolError
from nexus_runner.git import Author, Git
from nexus_runner.tool_paths import interpreter_paths, secret_files
from nexus_runner.tool_sandbox import ToolSandbox, ToolSandboxUnavailableError, tool_env
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.tools.args import RunShellArgs
from nexus_runner.tools.builtin import run_shell
from nexus_runner.tools.mcp import McpServer, McpStartFailed
from nexus_runner.workspace import Workspace

# A root-only directory of /etc on Debian hosts (TLS private keys), if this host has it.
SSL_PRIVATE = Path("/etc/ssl/private").is_dir()
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x", "PATH": "/usr/bin:/bin",
}  # fmt: skip


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "runs" / "run-1"
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("hello\n")
    (root / ".env").write_text("API_KEY=from-the-clone\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.fixture
def sandbox(tmp_path: Path) -> ToolSandbox:
    made = ToolSandbox.detect(
        "on", forbidden=[Path.cwd(), Path.home()], private=[tmp_path / "runs"]
    )
    assert made.bwrap is not None, made.reason  # bubblewrap works on this machine
    return made


def _registry(root: Path, sandbox: ToolSandbox, timeout: float = 20) -> ToolRegistry:
    ws = Workspace(root)
    home = root.with_name(f"{root.name}.home")
    ctx = ToolContext(
        workspace=ws,
        git=Git(ws.root, Author("a", "a@x")),
        shell_timeout=timeout,
        output_cap=20_000,
        home=home,
        sandbox=sandbox,
    )
    return ToolRegistry([ToolGrant(name="run_shell")], Permissions(), ctx)


async def _shell(reg: ToolRegistry, command: str) -> tuple[bool, str]:
    """run_shell itself, past the guard (which would ask a human about these probes)."""
    try:
        return True, await run_shell(reg.ctx, RunShellArgs(command=command))
    except ToolError as exc:
        return False, str(exc)


def test_the_environment_holds_nothing_of_the_runner(tmp_path: Path) -> None:
    parent = {
        "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "xterm",
        "NEXUS_LLM_API_KEY": "sk-live", "NEXUS_NATS_URL": "nats://x:4222",
        "NEXUS_NATS_CREDS_FILE": "/run/creds", "DEPLOY_TOKEN": "t", "SSH_AUTH_SOCK": "/s",
    }  # fmt: skip
    env = tool_env(parent, tmp_path / "home", {"SERVER_TOKEN": "named-by-the-server"})
    assert env == {
        "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "xterm",
        "HOME": str(tmp_path / "home"), "TMPDIR": "/tmp", "GIT_TERMINAL_PROMPT": "0",
        "PYTHONDONTWRITEBYTECODE": "1", "SERVER_TOKEN": "named-by-the-server",
    }  # fmt: skip


def test_off_runs_as_before_and_on_refuses_what_it_cannot_sandbox(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    argv = ["bash", "-c", "true"]
    off = ToolSandbox.detect("off")
    assert off.command(argv, workspace=tmp_path, home=None, cwd=tmp_path) == argv
    missing = str(tmp_path / "no-bwrap")
    auto = ToolSandbox.detect("auto", which=missing)
    assert auto.command(argv, workspace=tmp_path, home=None, cwd=tmp_path) == argv
    on = ToolSandbox.detect("on", which=missing)
    with pytest.raises(ToolSandboxUnavailableError) as refused:
        on.command(argv, workspace=tmp_path, home=None, cwd=tmp_path)
    assert "no-bwrap does not run" in str(refused.value)
    assert "NEXUS_TOOL_SANDBOX=on" in str(refused.value)
    assert isinstance(refused.value, ToolError)  # a tool result, never a runner crash
    assert any("will be refused" in r.getMessage() for r in caplog.records)


async def test_under_on_a_command_that_cannot_be_sandboxed_is_a_tool_error(
    workspace: Path, tmp_path: Path
) -> None:
    on = ToolSandbox.detect("on", which=str(tmp_path / "no-bwrap"))
    ok, output = await _shell(_registry(workspace, on), "touch ran.txt")
    assert not ok
    assert "the tools' sandbox is unavailable" in output
    assert not (workspace / "ran.txt").exists()


def test_git_is_read_only_secrets_withheld_and_runner_paths_never_bound(
    workspace: Path, sandbox: ToolSandbox, tmp_path: Path
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "prod.pem").write_text("key")
    (workspace / ".env.example").write_text("API_KEY=")
    (workspace / ".git" / "x.env").write_text("in .git: not a workspace file")
    assert secret_files(workspace) == [workspace / ".env", workspace / "sub" / "prod.pem"]
    argv = sandbox.command(
        ["true"],
        workspace=workspace,
        home=tmp_path / "home",
        cwd=workspace,
        readable=[Path.cwd(), Path.cwd().parent, tmp_path / "runs" / "run-2", Path("/usr/bin")],
    )
    mounts = [(argv[i], argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if "bind" in a]
    assert ("--bind", str(workspace), str(workspace)) in mounts
    assert ("--ro-bind", str(workspace / ".git"), str(workspace / ".git")) in mounts
    withheld = [dest for flag, _src, dest in mounts if dest.startswith(str(workspace))]
    assert str(workspace / ".env") in withheld
    assert str(workspace / "sub" / "prod.pem") in withheld
    assert str(workspace / ".env.example") not in withheld
    sources = {src for _flag, src, _dest in mounts}
    assert str(Path.cwd()) not in sources  # the runner's cwd (its run dir)
    assert str(Path.cwd().parent) not in sources
    assert str(tmp_path / "runs" / "run-2") not in sources  # another run
    assert "/" not in sources
    assert argv[argv.index("--") - 2 : argv.index("--")] == ["--chdir", str(workspace)]
    # Later: a withheld file the agent deleted or swapped for a link is not bound again (bwrap
    # would create it in the workspace); one it made itself is its own, not the clone's.
    (workspace / ".env").unlink()
    (workspace / ".env").symlink_to(workspace / "a.txt")
    (workspace / "sub" / "prod.pem").unlink()
    (workspace / "new.key").write_text("made by the agent")
    again = sandbox.command(["true"], workspace=workspace, home=None, cwd=workspace)
    read_only = [again[i + 2] for i, a in enumerate(again) if a == "--ro-bind"]
    assert [d for d in read_only if d.startswith(str(workspace))] == [str(workspace / ".git")]


def test_the_interpreters_on_path_and_their_prefixes_are_found(tmp_path: Path) -> None:
    base = tmp_path / "python-3.11"
    (base / "bin").mkdir(parents=True)
    (base / "lib").mkdir()
    (base / "bin" / "python3.11").write_text("")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\n")
    (venv / "bin" / "python").symlink_to(base / "bin" / "python3.11")
    found = set(interpreter_paths(f"{venv / 'bin'}:/usr/bin:{tmp_path / 'missing'}"))
    assert {venv / "bin", venv, base} <= found
    assert Path("/usr/bin") not in found  # the OS runtime is bound whole anyway


async def test_a_shell_command_reaches_nothing_of_the_runner(
    workspace: Path, sandbox: ToolSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    honey = f"honey-{uuid.uuid4().hex}"
    monkeypatch.setenv("NEXUS_LLM_API_KEY", honey)  # the runner's environment
    outside = tmp_path / "outside.txt"
    outside.write_text(honey)
    reg = _registry(workspace, sandbox)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        probes = (
            f"cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c {honey};"
            f" ls /proc | grep -cx {os.getpid()};"
            f" cat {outside} 2>&1;"
            f" (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>&1;"
            " echo planted >> .git/config 2>&1; mkdir .git/hooks/x 2>&1;"
            " echo env=$(wc -c < .env) nexus=$(env | grep -c NEXUS_);"
            " echo shadow=$(wc -c < /etc/shadow) private=$(ls -A /etc/ssl/private | wc -l)"
        )
        ok, output = await _shell(reg, probes)
    assert ok, output
    lines = output.splitlines()
    assert lines[:2] == ["0", "0"], output  # no honeytoken in any environ; no runner pid
    assert f"{outside}: No such file or directory" in output  # outside the workspace: absent
    assert "Connection refused" in output  # its own network: nothing on the host's ports
    assert output.count("Read-only file system") == 2  # .git/config, .git/hooks
    assert "env=0" in output  # .env withheld: an empty file
    assert "nexus=0" in output  # no NEXUS_ variable
    assert "/etc/shadow: Permission denied" in output  # root-only files withheld
    if SSL_PRIVATE:
        assert "private=0" in output  # and root-only directories emptied
    assert honey not in output
    assert "planted" not in (workspace / ".git" / "config").read_text()


async def test_the_normal_things_still_work(workspace: Path, sandbox: ToolSandbox) -> None:
    reg = _registry(workspace, sandbox)
    ok, output = await _shell(
        reg,
        "echo more >> a.txt && git status --short && git diff --stat && git log --oneline"
        " && python3 -c 'import sys; print(sys.version_info[0])' && echo $HOME && ls $TMPDIR",
    )
    assert ok, output
    assert " M a.txt" in output
    assert "a.txt | 1 +" in output
    assert "initial" in output
    assert "\n3\n" in output
    assert f"{workspace.name}.home" in output
    assert (workspace / "a.txt").read_text() == "hello\nmore\n"


def _host_processes(marker: str) -> list[int]:
    """Host pids whose command line holds `marker` (read from the host's /proc)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and pid.isdigit() and int(pid) != os.getpid():
            found.append(int(pid))
    return found


async def _gone(marker: str, within: float = 10) -> None:
    await eventually(
        lambda: _host_processes(marker),
        lambda left: not left,
        within=within,
        interval=0.05,
        what=f"no process with {marker!r} left",
    )


@pytest.fixture
def marker() -> Iterator[str]:
    # A sleep duration no other process uses: how the host sees the sandbox's processes.
    value = f"{300 + uuid.uuid4().int % 10_000 / 1000:.3f}"
    yield value
    for pid in _host_processes(f"sleep\0{value}"):  # never leave one behind
        os.kill(pid, 9)


async def test_a_timeout_kills_the_whole_sandbox(
    workspace: Path, sandbox: ToolSandbox, marker: str
) -> None:
    reg = _registry(workspace, sandbox, timeout=1)
    started = time.monotonic()
    ok, output = await _shell(reg, f"setsid sleep {marker} & sleep {marker}")
    assert not ok
    assert "timed out" in output
    assert time.monotonic() - started < 8
    await _gone(f"sleep\0{marker}")  # the detached one too: the PID namespace is gone


async def test_a_cancelled_command_takes_its_sandbox_with_it(
    workspace: Path, sandbox: ToolSandbox, marker: str
) -> None:
    reg = _registry(workspace, sandbox)
    task = asyncio.create_task(_shell(reg, f"sleep {marker} & sleep {marker}"))
    await eventually(
        lambda: len(_host_processes(f"sleep\0{marker}")) >= 2,
        interval=0.05,
        what="both sleeps started",
    )
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _gone(f"sleep\0{marker}")


def _mcp_server(tmp_path: Path, sandbox: ToolSandbox, command: str, path: str) -> McpServer:
    spec = McpServerSpec.model_validate({"name": "srv", "command": command, "tools": ["*"]})
    workspace = tmp_path / "runs" / "run-1"
    workspace.mkdir(parents=True, exist_ok=True)
    env = {"PATH": path, "HOME": str(tmp_path / "mcp-home")}
    return McpServer(spec, RunnerSettings(), workspace, tmp_path, env, [], sandbox=sandbox)


def test_an_mcp_server_that_is_not_there_says_what_is_missing(
    tmp_path: Path, sandbox: ToolSandbox
) -> None:
    with pytest.raises(McpStartFailed) as missing:
        _mcp_server(tmp_path, sandbox, "mcp-server-nowhere", "/usr/bin:/bin").command_line()
    assert str(missing.value) == (
        "its command 'mcp-server-nowhere' is not on its PATH /usr/bin:/bin"
    )
    with pytest.raises(McpStartFailed) as absent:
        _mcp_server(tmp_path, sandbox, "/opt/none/srv", "/usr/bin").command_line()
    assert str(absent.value) == "its command '/opt/none/srv' does not exist"


def test_an_mcp_server_installed_under_a_hidden_path_is_bound_in(
    tmp_path: Path, sandbox: ToolSandbox
) -> None:
    tool_bin = tmp_path / "local" / "bin"  # like ~/.local/bin, where uv tool and pipx put them
    tool_bin.mkdir(parents=True)
    script = tool_bin / "mcp-server-x"
    script.write_text("#!/bin/sh\necho ok\n")
    script.chmod(0o755)
    argv = _mcp_server(tmp_path, sandbox, "mcp-server-x", f"{tool_bin}:/usr/bin").command_line()
    assert ["--ro-bind", str(tool_bin), str(tool_bin)] == argv[
        argv.index(str(tool_bin)) - 1 : argv.index(str(tool_bin)) + 2
    ]
    assert ["--bind", str(tmp_path / "mcp-home"), str(tmp_path / "mcp-home")] == argv[
        argv.index(str(tmp_path / "mcp-home")) - 1 : argv.index(str(tmp_path / "mcp-home")) + 2
    ]
    assert argv[-1] == str(script)
    done = subprocess.run(argv, capture_output=True, text=True, env={}, check=False)
    assert done.stdout == "ok\n", done.stderr


def test_a_script_the_definition_names_by_absolute_path_is_bound_in(
    tmp_path: Path, sandbox: ToolSandbox
) -> None:
    hidden = tmp_path / "opt" / "servers"  # outside every path the tools see
    hidden.mkdir(parents=True)
    script = hidden / "server.sh"
    script.write_text("echo served\n")
    workspace = tmp_path / "runs" / "run-1"
    workspace.mkdir(parents=True, exist_ok=True)
    spec = McpServerSpec.model_validate(
        {"name": "x", "command": "sh", "args": [str(script)], "tools": ["*"]}
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "mcp-home")}
    server = McpServer(spec, RunnerSettings(), workspace, tmp_path, env, [], sandbox=sandbox)
    argv = server.command_line()
    assert ["--ro-bind", str(script), str(script)] == argv[
        argv.index(str(script)) - 1 : argv.index(str(script)) + 2
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env={}, check=False)
    assert done.stdout == "served\n", done.stderr
