"""Containment: secret values tracked and redacted whatever their shape, run_tests runs only
the configured command, commits withhold secrets, the final push cannot be redirected."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import quote

import pytest
from nexus_events.events.runs import RunConfig
from nexus_events.events.specs import Permissions, ToolGrant

from nexus_runner.config import RunnerSettings
from nexus_runner.containment import is_secret_file, reads_outside, track_runner, track_workspace
from nexus_runner.finishing import configured_test_command
from nexus_runner.git import Author, Git
from nexus_runner.safety import REDACTED, SecretRegistry
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.tools.contained import ContainedRegistry
from nexus_runner.workspace import Workspace

from .git_repos import bare_origin, sh

SECRET = "hT9-wq2Lz-0pXv7-kRm4"  # no known key shape: only tracking can catch it


@pytest.mark.parametrize(
    "shape",
    [
        SECRET,
        SECRET[::-1],
        SECRET.encode().hex(),
        SECRET.encode().hex().upper(),
        quote(f"{SECRET}/x", safe=""),
        base64.b64encode(SECRET.encode()).decode(),
        # inside a longer encoded text, in each alignment
        base64.b64encode(b"a" + SECRET.encode() + b"zz").decode(),
        base64.b64encode(b"ab" + SECRET.encode() + b"z").decode(),
        base64.urlsafe_b64encode(b"key=" + SECRET.encode()).decode(),
    ],
)
def test_a_tracked_value_is_redacted_in_any_of_its_shapes(shape: str) -> None:
    secrets = SecretRegistry([SECRET])
    text = f"the value: {shape} (end)"
    assert secrets.contains(text)
    clean = secrets.redact_values(text)
    assert REDACTED in clean
    assert shape not in clean
    assert "(end)" in clean


def test_ordinary_text_and_short_values_are_left_alone() -> None:
    secrets = SecretRegistry(["short", SECRET])
    assert len(secrets) == 1
    assert secrets.redact_values("nothing secret here") == "nothing secret here"


def test_env_like_files_give_their_values() -> None:
    secrets = SecretRegistry()
    added = secrets.add_text(
        "# comment\nexport AWS_SECRET_ACCESS_KEY='wJalrXUtnFEMI/K7MDENG'\n"
        "DB_PASS = s3cr3t-pass-word\n"
    )
    assert added == 2
    assert secrets.contains("wJalrXUtnFEMI/K7MDENG")
    assert secrets.contains("pass is s3cr3t-pass-word")
    assert not secrets.contains("AWS_SECRET_ACCESS_KEY")


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        (".env", True), (".env.production", True), ("prod.env", True), ("server.pem", True),
        ("id_rsa", True), ("id_ed25519", True), ("credentials", True), (".netrc", True),
        ("id_rsa.pub", False), (".env.example", False), ("README.md", False),
        ("environment.py", False),
    ],
)  # fmt: skip
def test_secret_file_names(name: str, secret: bool) -> None:
    assert is_secret_file(name) is secret


@pytest.mark.parametrize(
    ("command", "outside"),
    [
        ("cat ~/.ssh/id_rsa", True),
        ("cat /tmp/elsewhere/secret.txt", True),
        ("cat /proc/$PPID/environ", True),
        ("c''at ../secret", True),
        ("python -c \"print(open('/'+'etc/hostname').read())\"", True),
        ("env | grep $HOME", True),
        ("ls src && pytest -q 2>/dev/null", False),
        ("/usr/bin/python -m pytest tests/unit", False),
        ("cat ./src/a.py", False),
        ("pip download https://example.org/pkg/x.whl", False),
        ("curl -s file:///etc/passwd", True),
    ],
)
def test_commands_reading_outside_the_workspace(
    command: str, outside: bool, tmp_path: Path
) -> None:
    assert reads_outside(command, tmp_path) is outside


def test_the_runner_tracks_its_own_secrets(tmp_path: Path) -> None:
    creds = tmp_path / "nats.creds"
    creds.write_text("-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5\n")
    settings = RunnerSettings(llm_api_key="llm-key-0123456789", github_token="ghtok-abcdefghij")
    secrets = SecretRegistry()
    env = {
        "NEXUS_NATS_PASSWORD": "nats-pass-12345",
        "NEXUS_NATS_CREDS_FILE": str(creds),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "NEXUS_NATS_URL": "nats://127.0.0.1:4222",
    }
    track_runner(secrets, settings, env)
    for value in ("llm-key-0123456789", "ghtok-abcdefghij", "nats-pass-12345"):
        assert secrets.contains(value), value
    assert secrets.contains("eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5")
    assert not secrets.contains("/usr/local/bin:/usr/bin:/bin")
    assert not secrets.contains("nats://127.0.0.1:4222")
    assert not secrets.contains(str(creds))
    # Named like a secret only by accident: the commits' author stays readable.
    assert not secrets.contains(settings.git_author_name)
    assert not secrets.contains(settings.git_author_email)


def _registry(root: Path, test_command: str | None = "echo configured-tests-ran") -> ToolRegistry:
    ws = Workspace(root)
    secrets = SecretRegistry()
    ctx = ToolContext(
        workspace=ws,
        git=Git(ws.root, Author("a", "a@x"), secrets),
        shell_timeout=10,
        output_cap=10_000,
        test_command=test_command,
        secrets=secrets,
    )
    grants = [ToolGrant(name=t) for t in ("read_file", "run_shell", "run_tests", "git_commit")]
    return ContainedRegistry(grants, Permissions(can_commit=True), ctx)


async def test_run_tests_refuses_a_command_and_runs_the_configured_one(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    marker = tmp_path / "pwned"
    decision = reg.decide("run_tests", json.dumps({"command": f"touch {marker}"}))
    assert decision.action == "invalid"
    assert "command" in decision.reason
    assert not marker.exists()
    spec = next(s for s in reg.specs() if s["function"]["name"] == "run_tests")
    assert "command" not in spec["function"]["parameters"].get("properties", {})
    outcome = await reg.execute(reg.decide("run_tests", "{}"))
    assert outcome.ok
    assert "configured-tests-ran" in outcome.output


async def test_run_tests_without_a_configured_command_says_so(tmp_path: Path) -> None:
    reg = _registry(tmp_path, test_command=None)
    outcome = await reg.execute(reg.decide("run_tests", "{}"))
    assert not outcome.ok
    assert "no test command" in outcome.output


def test_the_test_command_comes_from_the_grant_then_settings_then_detection(
    tmp_path: Path,
) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    base = {"run_id": "r", "agent_id": "a", "system_prompt": "s", "model": {"name": "m"}}
    granted = RunConfig.model_validate(
        {**base, "tools": [{"name": "run_tests", "options": {"command": "make check"}}]}
    )
    plain = RunConfig.model_validate({**base, "tools": ["run_tests"]})
    settings = RunnerSettings(acceptance_command="tox -q")
    assert configured_test_command(granted, settings, tmp_path) == "make check"
    assert configured_test_command(plain, settings, tmp_path) == "tox -q"
    assert configured_test_command(plain, RunnerSettings(), tmp_path) == "python -m pytest -q"


async def test_secrets_read_are_redacted_for_the_model_and_never_sent_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "vault.txt").write_text(f"{SECRET}\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text("API_TOKEN=env-file-value-123\n")
    reg = _registry(ws)
    track_workspace(reg.ctx.secrets, ws)
    read = await reg.execute(reg.decide("read_file", json.dumps({"path": ".env"})))
    assert read.ok
    assert "env-file-value-123" not in read.output
    assert "API_TOKEN=" in read.output
    cat = await reg.execute(
        reg.decide("run_shell", json.dumps({"command": f"cat {outside}/vault.txt"}))
    )
    assert SECRET not in cat.output
    assert reg.ctx.secrets.contains(SECRET)
    marker = tmp_path / "sent"
    smuggle = {"command": f"echo {SECRET[::-1]} > {marker}"}
    refused = await reg.execute(reg.decide("run_shell", json.dumps(smuggle)))
    assert not refused.ok
    assert "secret" in refused.output
    assert not marker.exists()


async def test_a_commit_withholds_files_holding_a_secret_and_redacts_its_message(
    tmp_path: Path,
) -> None:
    sh(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "a.txt").write_text("a\n")
    sh(tmp_path, "add", "-A")
    sh(tmp_path, "commit", "-q", "-m", "init")
    reg = _registry(tmp_path)
    reg.ctx.secrets.add(SECRET)
    (tmp_path / "leak.txt").write_text(f"copied: {base64.b64encode(SECRET.encode()).decode()}\n")
    (tmp_path / "ok.txt").write_text("fine\n")
    outcome = await reg.execute(reg.decide("git_commit", json.dumps({"message": f"add {SECRET}"})))
    assert outcome.ok, outcome.output
    assert "leak.txt" in outcome.output
    assert sh(tmp_path, "show", "--name-only", "--format=%B", "HEAD").split() == [
        "add",
        REDACTED,
        "ok.txt",
    ]
    # A commit made from the shell is caught before any push.
    sh(tmp_path, "add", "leak.txt")
    sh(tmp_path, "commit", "-q", "-m", "from the shell")
    base = sh(tmp_path, "rev-list", "--max-parents=0", "HEAD").strip()
    assert await reg.ctx.git.secret_leaks(base) == ["leak.txt"]


async def test_the_final_push_cannot_be_redirected_by_the_repository(tmp_path: Path) -> None:
    origin, evil = bare_origin(tmp_path), tmp_path / "evil.git"
    sh(tmp_path, "init", "-q", "--bare", str(evil))
    ws = tmp_path / "runs" / "ws"
    git = Git(ws, Author("a", "a@x"))
    await git.clone(str(origin), None, "nexus/r1")
    (ws / "b.txt").write_text("b\n")
    assert await git.commit("work") is not None
    # What an agent's shell can do to the repository's config (and its HOME's).
    for args in (
        ["config", "--add", "remote.origin.pushurl", str(evil)],
        ["config", f"url.{evil}.insteadOf", str(origin)],
        ["config", f"url.{evil}.pushInsteadOf", str(origin)],
        ["remote", "add", "evil", str(evil)],
        ["config", "core.sshCommand", "touch /tmp/contain-pwned-ssh"],
        ["config", "credential.helper", "!touch /tmp/contain-pwned-cred"],
    ):
        sh(ws, *args)
    pushed = await git.push(str(origin), "nexus/r1")
    assert sh(origin, "rev-parse", "refs/heads/nexus/r1").strip() == pushed
    assert sh(evil, "for-each-ref") == ""


def test_plain_values_of_a_secret_place_are_not_tracked() -> None:
    """The runner's environment read back through /proc holds its run id and paths too:
    those stay readable (the branch name carries the run id)."""
    secrets = SecretRegistry()
    track_runner(
        secrets,
        RunnerSettings(),
        {"NEXUS_RUN_ID": "run-0123456789", "NEXUS_NATS_TOKEN": "nats-token-abcdef"},
    )
    secrets.add_text("NEXUS_RUN_ID=run-0123456789\nNEXUS_NATS_TOKEN=nats-token-abcdef\n")
    assert not secrets.contains("nexus/run-0123456789")
    assert secrets.contains("nats-token-abcdef")
