"""The tools' own sandbox inside a confined run, started as the scheduler starts it
(`LocalProcessRuntime` with a `Confinement`, the real runner, real NATS, the fake model).

What the agent makes run — a shell command, a ``conftest.py`` the repository plants (run by
``run_tests``), an MCP stdio server — probes what the runner holds (tool_probe.py): the
runner's environment (the model API key, a honeytoken), NATS and the model's host, the run
dir and its config, another run's config, the origin, a file under /var/tmp, the
workspace's ``.git`` and ``.env``. None of it is reachable; the normal things still work
(git status/log/diff in run_shell, writing files, the repository's tests via run_tests, an
MCP server's tool).
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nexus_events.events.runs import RunCompleted, ToolResult
from nexus_events.events.specs import RepoSpec
from nexus_events.transport.bus import Bus
from nexus_scheduler.runtime.confinement import Confinement
from nexus_scheduler.runtime.local import LocalProcessRuntime
from nexus_testing import eventually
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from .conftest import git
from .support import make_config, run_events
from .test_mcp import FAKE_SERVER

PROBE = Path(__file__).with_name("tool_probe.py")
CONFTEST = (
    "import subprocess, sys\n"
    "subprocess.run([sys.executable, 'tool_probe.py', 'conftest.json'], check=True)\n"
)
PROBE_SHELL = "python tool_probe.py shell.json"
GIT_SHELL = "git status --short; git log --oneline; echo x >> calc.py; git diff --stat"
# .git is read-only: no `git checkout`; the agent restores a file from the object store.
WRITE_SHELL = "git show HEAD:calc.py > calc.py; echo made > made.txt; cat made.txt"
# The project's sources, which the tools must not see (its venv they may).
PROJECT = Path(__file__).resolve().parents[4]
CALC = "def add(a, b):\n    return a + b\n"
TEST_CALC = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
# What a tool may find in its environment (docs/sandbox.md, "The tools' sandbox").
TOOL_ENV = {
    "PATH", "HOME", "LANG", "TERM", "TZ", "USER", "TMPDIR", "PYTHONDONTWRITEBYTECODE",
    "GIT_TERMINAL_PROMPT", "PWD", "SHLVL", "_", "OLDPWD",
    "COLUMNS", "LINES", "PYTEST_VERSION",  # set by pytest itself (the conftest probe)
}  # fmt: skip


@pytest.fixture
def honey() -> str:
    return f"honey-{uuid.uuid4().hex}"


@pytest.fixture
def var_tmp_secret(honey: str) -> Iterator[Path]:
    path = Path("/var/tmp") / f"nexus-tool-sandbox-{uuid.uuid4().hex}.txt"
    path.write_text(honey)
    try:
        yield path
    finally:
        path.unlink()


def _origin(tmp_path: Path, honey: str, targets: dict[str, Any]) -> Path:
    """A bare origin of a small passing project that plants a probe in its conftest.py."""
    src = tmp_path / "src-repo"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    files = {
        "calc.py": CALC,
        "test_calc.py": TEST_CALC,
        "conftest.py": CONFTEST,
        "tool_probe.py": PROBE.read_text(),
        "probe-targets.json": json.dumps(targets),
        "pyproject.toml": '[project]\nname = "calc"\nversion = "0"\n',
        ".env": f"API_KEY={honey}\n",
        ".gitignore": "__pycache__/\n.pytest_cache/\n*.json\n!probe-targets.json\n",
    }
    for name, text in files.items():
        (src / name).write_text(text)
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "initial")
    bare = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(src), str(bare))
    return bare


async def test_the_agents_commands_reach_nothing_of_the_runner(
    bus: Bus,
    nats_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    honey: str,
    var_tmp_secret: Path,
) -> None:
    runner_dirs = tmp_path / "runner-dirs"
    other = runner_dirs / "run-other"
    other.mkdir(parents=True)
    (other / "config.json").write_text(json.dumps({"input": honey}))
    nats_host_port = nats_url.rpartition("//")[2]
    script = [
        Reply(tool_calls=(ToolCall("run_shell", {"command": PROBE_SHELL}, id="probe"),)),
        Reply(tool_calls=(ToolCall("run_shell", {"command": GIT_SHELL}, id="git"),)),
        Reply(tool_calls=(ToolCall("run_shell", {"command": WRITE_SHELL}, id="write"),)),
        Reply(tool_calls=(ToolCall("run_tests", {}, id="tests"),)),
        Reply(tool_calls=(ToolCall("mcp_probe__echo", {"text": "hello"}, id="mcp"),)),
        Reply(tool_calls=(ToolCall("finish", {"summary": "probed"}),)),
    ]
    async with FakeOpenAI(script) as llm:
        model_host_port = llm.base_url.split("//")[1].split("/")[0]
        config = make_config(
            llm.base_url,
            tools=["run_shell", "run_tests", "finish"],
            mcp_servers=[
                {
                    "name": "probe",
                    "command": "sh",  # found on the server's PATH, bound in by the runner
                    "args": [
                        "-c",
                        f"python tool_probe.py mcp.json && exec python -P {FAKE_SERVER}",
                    ],
                    "tools": ["echo"],
                    "auto_approve": ["*"],
                }
            ],
        )
        workspace = tmp_path / "workspaces" / config.run_id
        run_dir = runner_dirs / config.run_id
        targets = {
            "honey": honey,
            "read": [
                str(run_dir / "config.json"),
                str(other / "config.json"),
                str(tmp_path / "origin.git" / "config"),
                str(var_tmp_secret),
                ".env",
                "/proc/1/environ",
                "/etc/shadow",
            ],
            "write": [".git/config", ".git/hooks/pre-commit"],
            "connect": [nats_host_port, model_host_port],
            "list": [str(PROJECT), "/var/tmp", str(Path.home())],
        }
        origin = _origin(tmp_path, honey, targets)
        config = config.model_copy(update={"repo": RepoSpec(url=str(origin))})
        origin_config = (origin / "config").read_text()
        venv_bin = Path(sys.executable).parent
        for name, value in {
            "NEXUS_NATS_URL": nats_url,
            "NEXUS_BUDGET_RESERVATIONS": "off",  # no spend service here
            "NEXUS_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
            "NEXUS_HEARTBEAT_INTERVAL": "1",
            "NEXUS_LLM_API_KEY": honey,  # what a tool that reads the runner's environ finds
            "NEXUS_MCP_PATH": f"{venv_bin}:/usr/bin:/bin",
            # The MCP server's script is not its command: the operator's allowlist shows it.
            "NEXUS_TOOL_SANDBOX_READABLE": json.dumps([str(FAKE_SERVER.parent)]),
            "PATH": f"{venv_bin}:/usr/bin:/bin",
            "OTEL_SDK_DISABLED": "true",
        }.items():
            monkeypatch.setenv(name, value)
        runtime = LocalProcessRuntime(
            runner_dirs,
            command=(sys.executable, "-m", "nexus_runner"),
            confinement=Confinement(shutil.which("bwrap") or "bwrap"),
        )
        await runtime.start()
        try:
            await runtime.start_run(config)
            status = await eventually(
                lambda: runtime.status(config.run_id),
                lambda s: not s.live,
                within=90,
                interval=0.2,
                what="the confined runner to end",
            )
        finally:
            await runtime.close()
    log = (run_dir / "runner.log").read_text()
    events = await run_events(bus, config.run_id)
    assert isinstance(events[-1], RunCompleted), "\n".join(e.model_dump_json() for e in events)
    assert status.exit_code == 0, log
    results = {e.call_id: e for e in events if isinstance(e, ToolResult)}

    # The normal things work.
    assert results["probe"].ok, results["probe"].output
    assert results["git"].ok, results["git"].output
    assert "initial" in results["git"].output  # git log
    assert "calc.py | 1 +" in results["git"].output  # git diff of an edit
    assert results["write"].ok
    assert "made" in results["write"].output
    assert (workspace / "made.txt").read_text() == "made\n"
    assert results["tests"].ok, results["tests"].output
    assert "1 passed" in results["tests"].output
    assert results["mcp"].ok, results["mcp"].output
    assert "hello" in results["mcp"].output

    # Nothing of the runner is reachable, from any of the three.
    for source in ("shell", "conftest", "mcp"):
        report = json.loads((workspace / f"{source}.json").read_text())
        assert report["read"].pop(".env") == "ok:", source  # withheld: an empty file
        assert not [v for v in report["read"].values() if v.startswith("ok")], (source, report)
        assert set(report["write"].values()) == {"OSError"}, (source, report)  # read-only
        assert set(report["connect"].values()) == {"ConnectionRefusedError"}, (source, report)
        assert report["processes_with_honey"] == [], source
        assert report["proc"] is False, source  # nested in a confined runner: no /proc
        assert not report["env_has_honey"], source
        assert set(report["env"]) <= TOOL_ENV | {"FAKE_MCP_TOKEN"}, (source, report["env"])
        # No other run: only this workspace (and its tools' home, for shell commands).
        assert config.run_id in report["beside_workspace"]
        assert set(report["beside_workspace"]) <= {config.run_id, f"{config.run_id}.home"}
        assert {"var", "home", "run", "opt", "srv"}.isdisjoint(report["root"]), report["root"]
        listed = report["list"]
        assert {"services", "libs", "cli", "pyproject.toml"}.isdisjoint(listed[str(PROJECT)])
        assert listed["/var/tmp"] == "FileNotFoundError"
        assert not {".bash_history", ".ssh", ".config"} & set(listed[str(Path.home())])
    assert "fsmonitor" not in (workspace / ".git" / "config").read_text()
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert (origin / "config").read_text() == origin_config
    # The honeytoken is in no event either.
    assert honey not in "".join(e.model_dump_json() for e in events)
