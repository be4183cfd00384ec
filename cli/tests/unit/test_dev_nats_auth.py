"""The dev stack's NATS users (issue 35): passwords kept private and reused, the server config
the very text compose mounts, credentials masked for people, the runner's identity swapped in."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from nexus_events.nats_config import users

from nexus_cli.devstack import nats_auth
from nexus_cli.devstack.as_runner import runner_environ
from nexus_cli.devstack.state import StackState, write_state

ROOT = Path(__file__).resolve().parents[3]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_passwords_are_made_once_private_and_reused(tmp_path: Path) -> None:
    first = nats_auth.stack_passwords(tmp_path)
    assert set(first) == set(users())
    assert {"core", "scheduler", "runner", "admin", "mcp-read"} <= set(first)
    assert len(set(first.values())) == len(first)  # one per user, none shared
    assert all(len(p) >= 64 for p in first.values())
    path = tmp_path / nats_auth.PASSWORDS_FILE
    assert _mode(path) == 0o600
    assert nats_auth.stack_passwords(tmp_path) == first  # a restart keeps them


def test_a_user_the_file_lacks_gets_one_and_the_others_are_kept(tmp_path: Path) -> None:
    first = nats_auth.stack_passwords(tmp_path)
    path = tmp_path / nats_auth.PASSWORDS_FILE
    kept = {u: p for u, p in first.items() if u != "flows"}
    path.write_text(json.dumps(kept))
    path.chmod(0o644)
    again = nats_auth.stack_passwords(tmp_path)
    assert {u: again[u] for u in kept} == kept
    assert again["flows"]
    assert again["flows"] != first["flows"]
    assert _mode(path) == 0o600


@pytest.mark.parametrize("text", ["{not json", '["core"]', '{"core": 3}', '{"core": ""}'])
def test_an_unreadable_passwords_file_is_a_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / nats_auth.PASSWORDS_FILE
    path.write_text(text)
    with pytest.raises(nats_auth.PasswordsFileError, match="delete it to get new ones"):
        nats_auth.stack_passwords(tmp_path)
    assert path.read_text() == text  # never overwritten behind the operator's back


def test_the_dev_config_is_the_one_compose_and_kubernetes_mount(tmp_path: Path) -> None:
    written = nats_auth.write_server_config(tmp_path)
    assert written.read_text() == (ROOT / "deploy/nats/nats.conf").read_text()
    assert written.read_text() == (ROOT / "deploy/k8s/base/nats/nats.conf").read_text()


def test_the_server_gets_every_password_and_a_service_only_its_own(tmp_path: Path) -> None:
    passwords = nats_auth.stack_passwords(tmp_path)
    server = nats_auth.server_env(passwords)
    assert server["NEXUS_CHANNEL_GATEWAY_NATS_PASSWORD"] == passwords["channel-gateway"]
    assert len(server) == len(users())
    core = nats_auth.service_env("core", passwords)
    assert core == {"NEXUS_NATS_USER": "core", "NEXUS_NATS_PASSWORD": passwords["core"]}


def test_the_admin_url_carries_the_credentials_and_people_see_them_masked() -> None:
    urls = "nats://127.0.0.1:4222,nats://127.0.0.1:4223"
    admin = nats_auth.admin_url(urls, {"admin": "nxsecret"})
    assert admin == "nats://admin:nxsecret@127.0.0.1:4222,nats://admin:nxsecret@127.0.0.1:4223"
    assert nats_auth.without_credentials(admin) == (urls, "admin", "nxsecret")
    assert nats_auth.redacted(admin) == (
        "nats://admin:***@127.0.0.1:4222,nats://admin:***@127.0.0.1:4223"
    )
    message = f"cannot connect to NATS at {admin}: refused"
    assert "nxsecret" not in nats_auth.redacted(message)
    assert nats_auth.redacted(urls) == urls  # nothing to mask


def test_the_state_file_is_its_owners_only(tmp_path: Path) -> None:
    write_state(tmp_path, StackState(home=str(tmp_path), nats_url="nats://admin:pw@h:1"))
    assert _mode(tmp_path / "state.json") == 0o600


def test_the_runner_pass_env_adds_the_runners_password_to_what_was_set() -> None:
    assert json.loads(nats_auth.runner_pass_env(None)) == ["RUNNER_NATS_PASSWORD"]
    assert json.loads(nats_auth.runner_pass_env('["GIT_SSH"]')) == [
        "GIT_SSH",
        "RUNNER_NATS_PASSWORD",
    ]
    with pytest.raises(ValueError, match="JSON list"):
        nats_auth.runner_pass_env("GIT_SSH")


def test_a_runner_swaps_the_schedulers_identity_for_its_own() -> None:
    scheduler = {
        "NEXUS_NATS_USER": "scheduler",
        "NEXUS_NATS_PASSWORD": "sched-pw",
        "RUNNER_NATS_PASSWORD": "runner-pw",
        "PATH": "/usr/bin",
    }
    env = runner_environ(scheduler)
    assert (env["NEXUS_NATS_USER"], env["NEXUS_NATS_PASSWORD"]) == ("runner", "runner-pw")
    assert "sched-pw" not in env.values()
    with pytest.raises(ValueError, match="RUNNER_NATS_PASSWORD is not set"):
        runner_environ({"NEXUS_NATS_USER": "scheduler"})


def test_the_launcher_execs_the_command_as_the_runner(tmp_path: Path) -> None:
    probe = "import json, os; print(json.dumps({k: os.environ.get(k) for k in"
    probe += " ('NEXUS_NATS_USER', 'NEXUS_NATS_PASSWORD', 'NEXUS_NATS_NAME')}), os.getpid())"
    argv = nats_auth.runner_command([sys.executable, "-c", probe])
    env = {"NEXUS_NATS_USER": "scheduler", "NEXUS_NATS_PASSWORD": "sched-pw",
           "RUNNER_NATS_PASSWORD": "runner-pw", "PATH": "/usr/bin:/bin"}  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=30)
    seen, pid = out.rsplit(" ", 1)
    assert json.loads(seen) == {
        "NEXUS_NATS_USER": "runner",
        "NEXUS_NATS_PASSWORD": "runner-pw",
        "NEXUS_NATS_NAME": "runner",
    }
    assert int(pid) == proc.pid  # exec'd in place: the runtime's pid file names the runner
    missing = subprocess.run(
        nats_auth.runner_command(["true"]), env={"PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert missing.returncode == 2
    assert "RUNNER_NATS_PASSWORD is not set" in missing.stderr
