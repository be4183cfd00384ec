"""The dev stack's NATS users (issue 35): passwords kept private and reused, the server config
the very text compose mounts, credentials masked for people, the callout's issuer private."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from nexus_events.runtime.nats_config import users

from nexus_cli.devstack import nats_auth
from nexus_cli.devstack.state import StackState, write_state

ROOT = Path(__file__).resolve().parents[3]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_passwords_are_made_once_private_and_reused(tmp_path: Path) -> None:
    first = nats_auth.stack_passwords(tmp_path)
    assert set(first) == set(users())
    assert {"core", "scheduler", "admin", "mcp-read"} <= set(first)
    assert "runner" not in first  # runs connect with their own credential (auth callout)
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
    server = nats_auth.server_env(passwords, nats_auth.stack_issuer(tmp_path))
    assert server["NEXUS_CHANNEL_GATEWAY_NATS_PASSWORD"] == passwords["channel-gateway"]
    assert len(server) == len(users()) + 1  # and the callout issuer's public key
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


def test_the_callout_issuer_is_made_once_private_and_reused(tmp_path: Path) -> None:
    seed = nats_auth.stack_issuer(tmp_path)
    assert seed.startswith("SA")
    assert _mode(tmp_path / nats_auth.ISSUER_FILE) == 0o600
    assert nats_auth.stack_issuer(tmp_path) == seed  # a restart keeps it
    env = nats_auth.server_env(nats_auth.stack_passwords(tmp_path), seed)
    public = env["NEXUS_AUTH_CALLOUT_ISSUER"]
    assert public.startswith("A")
    assert seed not in env.values()  # nats-server gets the public key, never the seed
    (tmp_path / nats_auth.ISSUER_FILE).write_text("not a seed\n")
    with pytest.raises(nats_auth.PasswordsFileError, match="delete it"):
        nats_auth.stack_issuer(tmp_path)


def test_the_module_needs_no_scheduler_until_the_issuer_is_asked_for() -> None:
    """The CLI's image has no nexus_scheduler (the dev-stack extra), and `nexus mcp serve` there
    imports this module for `redacted`: importing it must not import the scheduler."""
    probe = (
        "import sys, nexus_cli.devstack.nats_auth, nexus_cli.mcp.serve;"
        " print('nexus_scheduler' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"
