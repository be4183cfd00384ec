"""Argument validation, errors and exit codes through typer's CliRunner (no servers needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import invoke as nexus

from nexus_cli.devstack.state import ServiceEntry, StackState, process_ref, read_state, write_state
from nexus_cli.errors import ExitCode


def test_no_arguments_shows_help(env: dict[str, str]) -> None:
    result = nexus(env)
    assert result.exit_code == 2
    assert "agents" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("run", "bad agent"), "invalid agent id 'bad agent'"),
        (("run", "impl", "--follow", "--bg"), "--follow and --bg exclude each other"),
        (("run", "impl", "--task", "fix the test"), "--task takes a task id"),
        (("run", "impl", "--label", "novalue"), "use KEY=VALUE"),
        (("attach", "run.1"), "invalid run id 'run.1'"),
        (("agents", "show", "a*"), "invalid agent id"),
        (("task", "create", "t", "--column", "nowhere"), "unknown column 'nowhere'"),
        (("board", "--column", "nowhere"), "unknown column"),
        (("dev", "logs", "nginx"), "unknown service 'nginx'"),
    ],
)
def test_invalid_input_exits_2_with_one_line(
    env: dict[str, str], args: tuple[str, ...], message: str
) -> None:
    result = nexus(env, *args)
    assert result.exit_code == ExitCode.INVALID, result.output
    assert message in result.stderr
    assert result.stderr.startswith("error: ")


def test_typer_usage_errors_exit_2(env: dict[str, str]) -> None:
    assert nexus(env, "dlq", "show", "0").exit_code == 2
    assert nexus(env, "ps", "-o", "yaml").exit_code == 2
    assert nexus(env, "run").exit_code == 2


def test_malformed_documents_exit_2_field_by_field_before_any_connection(
    env: dict[str, str], tmp_path: Path
) -> None:
    docs = tmp_path / "agents"
    docs.mkdir()
    (docs / "a.yaml").write_text("id: a\nrole: wizard\nmodel: {name: m}\nsystem_prompt: hi\n")
    (docs / "b.yml").write_text("- just\n- a list\n")
    (docs / "c.json").write_text(
        '{"id": "c", "role": "planner", "model": {}, "system_prompt": "x"}'
    )
    result = nexus(env, "agents", "apply", "-f", str(docs))
    assert result.exit_code == ExitCode.INVALID
    assert "nothing was applied" in result.stderr
    assert f"{docs / 'a.yaml'}: role: Input should be" in result.stderr
    assert f"{docs / 'b.yml'}: (document): must be a mapping, got list" in result.stderr
    assert f"{docs / 'c.json'}: model.name: Field required" in result.stderr


def test_duplicate_and_missing_documents(env: dict[str, str], tmp_path: Path) -> None:
    doc = "id: a\nrole: planner\nmodel: {name: m}\nsystem_prompt: hi\n"
    (tmp_path / "one.yaml").write_text(doc)
    (tmp_path / "two.yaml").write_text(doc)
    dup = nexus(env, "agents", "apply", "-f", str(tmp_path))
    assert dup.exit_code == ExitCode.INVALID
    assert "defined twice: a" in dup.stderr
    missing = nexus(env, "agents", "apply", "-f", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == ExitCode.NOT_FOUND


def test_skill_without_front_matter_is_invalid(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "py.md").write_text("# no front matter\n")
    result = nexus(env, "skills", "apply", "-f", str(tmp_path))
    assert result.exit_code == ExitCode.INVALID
    assert "py.md: (document): must open with a '---' front matter block" in result.stderr


def test_dev_context_without_a_stack_is_unavailable(env: dict[str, str]) -> None:
    result = nexus(env, "ps")
    assert result.exit_code == ExitCode.UNAVAILABLE
    assert "the dev stack is not running" in result.stderr
    assert "nexus dev up" in result.stderr


def test_json_errors_for_scripts(env: dict[str, str]) -> None:
    result = nexus(env, "ps", "-o", "json")
    assert result.exit_code == ExitCode.UNAVAILABLE
    error = json.loads(result.stderr)["error"]
    assert error["code"] == 4
    assert "dev stack is not running" in error["message"]


def test_unreachable_nats_is_unavailable(env: dict[str, str]) -> None:
    from nexus_cli.devstack.probes import free_port

    result = nexus(env, "--nats-url", f"nats://127.0.0.1:{free_port()}", "agents", "ls")
    assert result.exit_code == ExitCode.UNAVAILABLE
    assert "cannot reach NATS" in result.stderr


def test_contexts_set_use_ls_rm(env: dict[str, str]) -> None:
    assert nexus(env, "--context", "prod", "ps").exit_code == ExitCode.NOT_FOUND
    assert nexus(env, "context", "set", "prod").exit_code == ExitCode.INVALID
    saved = nexus(env, "context", "set", "prod", "--nats-url", "nats://nats.prod:4222")
    assert saved.exit_code == 0, saved.stderr
    assert nexus(env, "context", "use", "prod").exit_code == 0
    listed = json.loads(nexus(env, "context", "ls", "-o", "json").stdout)
    assert listed["current"] == "prod"
    assert listed["contexts"]["prod"] == {"nats_url": "nats://nats.prod:4222"}
    assert nexus(env, "context", "use", "nope").exit_code == ExitCode.NOT_FOUND
    assert nexus(env, "context", "rm", "prod").exit_code == 0
    assert json.loads(nexus(env, "context", "ls", "-o", "json").stdout)["current"] == "dev"
    Path(env["NEXUS_CONTEXT_FILE"]).write_text("current: [oops\n")
    broken = nexus(env, "context", "ls")
    assert broken.exit_code == ExitCode.INVALID
    assert "cannot read the context file" in broken.stderr


def test_dev_status_and_down_without_a_stack(env: dict[str, str]) -> None:
    status = nexus(env, "dev", "status")
    assert status.exit_code == ExitCode.UNAVAILABLE
    assert "no dev stack" in status.stderr
    down = nexus(env, "dev", "down")
    assert down.exit_code == 0
    assert "no dev stack" in down.stdout


def test_down_cleans_a_stale_stack(env: dict[str, str]) -> None:
    """A supervisor that died (kill -9) leaves services behind: down stops exactly those."""
    home = Path(env["NEXUS_DEV_HOME"])
    home.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ref = process_ref(leftover.pid)
        state = StackState(home=str(home), status="ready", supervisor=process_ref(dead.pid))
        state.supervisor.create_time = 1.0  # whatever runs on that pid now is not it
        state.services["core"] = ServiceEntry(name="core", pid=ref.pid, create_time=ref.create_time)
        write_state(home, state)
        loaded = read_state(home)
        assert loaded is not None
        assert not loaded.supervisor_alive()
        status = nexus(env, "dev", "status", "-o", "json")
        assert status.exit_code == ExitCode.UNAVAILABLE
        assert json.loads(status.stdout)["status"] == "stale"
        down = nexus(env, "dev", "down")
        assert down.exit_code == 0, down.stderr
        assert "cleaned up a stale dev stack" in down.stdout
        assert leftover.wait(timeout=10) is not None
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()
