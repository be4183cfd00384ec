"""Finishing a run: pull requests through a fake GitHub over HTTP, and pushing failed work.

Real NATS, a real git repository with a bare remote, the fake model and the fake GitHub
REST server (tests/fakes/github_api.py) that the runner's httpx provider talks to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import LOGS, RUNS
from nexus_events.events.runs import Reason, RunCompleted, RunFailed
from nexus_events.transport.bus import Bus
from tests.fakes.github_api import FakeGitHub
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_runner.errors import RunnerError
from nexus_runner.provider import GitHubProvider, parse_repository

from .conftest import git
from .support import make_config

# Not shaped like any provider's token, so redaction cannot hide a leak: it must not be sent.
TOKEN = "nexus-fake-gh-credential-7d1c9e2a5b"
PR_PERMS = {"can_commit": True, "can_push": True, "can_open_pr": True}
SUMMARY = "Fix add()\n\nadd() subtracted its arguments; it adds them now."


def tc(name: str, **args: Any) -> ToolCall:
    return ToolCall(name, args)


def finish(summary: str) -> Reply:
    return Reply(tool_calls=(tc("finish", summary=summary),))


def fix_script() -> list[Reply]:
    return [
        Reply(tool_calls=(tc("edit_file", path="calc.py", old="a - b", new="a + b"),)),
        Reply(tool_calls=(tc("run_shell", command="env"),)),
        finish(SUMMARY),
    ]


def github_settings(
    settings: RunnerSettings, monkeypatch: pytest.MonkeyPatch, gh: Any, **extra: Any
) -> RunnerSettings:
    """The fixture's settings plus the GitHub ones read from the environment, as in a pod."""
    monkeypatch.setenv("NEXUS_GITHUB_API_URL", gh.api_url)
    monkeypatch.setenv("NEXUS_GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("NEXUS_GITHUB_REPOSITORY", "acme/calc")
    fields = settings.model_dump(exclude={"github_token", "github_api_url", "github_repository"})
    fields.update(extra)
    result = RunnerSettings(**fields)
    assert result.github_token is not None
    assert result.github_token.get_secret_value() == TOKEN
    assert TOKEN not in repr(result)
    return result


async def everything_published(bus: Bus, run_id: str) -> str:
    """Every byte (headers and bodies) of the run's events and log lines."""
    parts: list[str] = []
    for stream, subject in (
        (RUNS, subjects.run_events_filter(run_id)),
        (LOGS, subjects.run_logs_filter(run_id)),
    ):
        async for msg in bus.replay_raw(stream, filter_subject=subject):
            parts.append(msg.data.decode())
            parts.append(repr(msg.headers))
    return "\n".join(parts)


async def test_run_opens_exactly_one_pull_request(
    bus: Bus,
    runner_bus: Bus,
    settings: RunnerSettings,
    remote: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeGitHub(token=TOKEN) as gh, FakeOpenAI(fix_script()) as llm:
        config = make_config(llm.base_url, repo={"url": str(remote)}, permissions=PR_PERMS)
        run_settings = github_settings(settings, monkeypatch, gh)
        terminal = await execute_run(config, run_settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    result = terminal.result
    assert result.pushed is True
    assert result.pr_url == "https://github.example/acme/calc/pull/1"
    branch = f"nexus/{config.run_id}"
    # One lookup, one create, with the token in the Authorization header only.
    assert [(r.method, r.path) for r in gh.requests] == [
        ("GET", "/repos/acme/calc/pulls"),
        ("POST", "/repos/acme/calc/pulls"),
    ]
    assert gh.requests[0].query == {"head": f"acme:{branch}", "state": "open"}
    assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in gh.requests)
    [created] = gh.created()
    assert created.body == {"title": "Fix add()", "body": SUMMARY, "head": branch, "base": "main"}
    assert len(gh.pulls) == 1
    assert "a + b" in git(remote, "show", f"{branch}:calc.py")
    # The secret is in no event and no log line (the shell's `env` output included).
    published = await everything_published(bus, config.run_id)
    assert "tool_result" in published
    assert TOKEN not in published


async def test_retried_attempt_reuses_the_open_pull_request(
    bus: Bus,
    runner_bus: Bus,
    settings: RunnerSettings,
    remote: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeGitHub(token=TOKEN) as gh:
        async with FakeOpenAI(fix_script()) as llm:
            config = make_config(llm.base_url, repo={"url": str(remote)}, permissions=PR_PERMS)
            first = await execute_run(
                config, github_settings(settings, monkeypatch, gh), runner_bus
            )
        assert isinstance(first, RunCompleted), first
        # Attempt 2 of the same run, on a fresh workspace (a new pod): it continues from the
        # pushed branch, adds a commit, pushes (fast-forward) and finishes again.
        script = [
            Reply(tool_calls=(tc("write_file", path="NOTES.md", content="add() adds\n"),)),
            finish("Document add()"),
        ]
        async with FakeOpenAI(script) as llm:
            model = config.model.model_copy(update={"base_url": llm.base_url})
            retry = config.model_copy(update={"attempt": 2, "model": model})
            retry_settings = github_settings(
                settings, monkeypatch, gh, workspace_root=tmp_path / "attempt-2"
            )
            second = await execute_run(retry, retry_settings, runner_bus)
    assert isinstance(second, RunCompleted), second
    assert second.result.pr_url == first.result.pr_url
    assert second.result.pushed is True
    assert len(gh.created()) == 1  # the second finish found the open PR and made no new one
    assert len(gh.pulls) == 1
    branch = f"nexus/{config.run_id}"
    log = git(remote, "log", "--format=%s", branch)
    assert log.splitlines()[:2] == ["Document add()", "Fix add()"]
    assert second.result.files_changed == ["NOTES.md", "calc.py"]


async def test_without_pr_permission_github_is_not_called(
    bus: Bus,
    runner_bus: Bus,
    settings: RunnerSettings,
    remote: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeGitHub(token=TOKEN) as gh, FakeOpenAI(fix_script()) as llm:
        config = make_config(
            llm.base_url,
            repo={"url": str(remote)},
            permissions={"can_commit": True, "can_push": True, "can_open_pr": False},
        )
        terminal = await execute_run(config, github_settings(settings, monkeypatch, gh), runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.result.pushed is True
    assert terminal.result.pr_url is None
    assert gh.requests == []


async def test_provider_treats_422_already_exists_as_the_open_pull_request() -> None:
    async with FakeGitHub(token=TOKEN) as gh:
        provider = GitHubProvider(TOKEN, gh.api_url)
        url = "git@github.com:acme/calc.git"
        first = await provider.open_pull_request(url, "nexus/r1", "main", "Fix", "body")
        gh.stale_lists = 1  # the next list misses it, so the create meets GitHub's 422
        second = await provider.open_pull_request(url, "nexus/r1", "main", "Fix", "body")
    assert second == first
    assert [r.method for r in gh.requests] == ["GET", "POST", "GET", "POST", "GET"]
    assert len(gh.pulls) == 1
    assert TOKEN not in repr(provider)


async def test_provider_error_names_the_status_not_the_token() -> None:
    async with FakeGitHub(token=TOKEN) as gh:
        provider = GitHubProvider("wrong-" + TOKEN, gh.api_url)
        with pytest.raises(RunnerError) as caught:
            await provider.open_pull_request(
                "https://github.com/acme/calc", "nexus/r1", "main", "Fix", "body"
            )
    assert "401 Bad credentials" in str(caught.value)
    assert TOKEN not in str(caught.value)
    assert gh.created() == []


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/acme/calc.git", ("acme", "calc")),
        ("https://github.com/acme/calc", ("acme", "calc")),
        ("ssh://git@github.com/acme/calc.git", ("acme", "calc")),
        ("git@github.com:acme/calc.git", ("acme", "calc")),
        ("https://ghe.example.com/acme/calc.git", ("acme", "calc")),
    ],
)
def test_parse_repository(url: str, expected: tuple[str, str]) -> None:
    assert parse_repository(url) == expected


def test_parse_repository_refuses_a_local_path() -> None:
    with pytest.raises(RunnerError):
        parse_repository("/srv/git/calc.git")


async def test_failing_acceptance_pushes_the_work_branch_and_opens_no_pr(
    bus: Bus,
    runner_bus: Bus,
    settings: RunnerSettings,
    remote: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = [
        Reply(tool_calls=(tc("write_file", path="notes.txt", content="add() looks odd\n"),)),
        finish("Could not fix add()"),
    ]
    async with FakeGitHub(token=TOKEN) as gh, FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, repo={"url": str(remote)}, permissions=PR_PERMS)
        terminal = await execute_run(config, github_settings(settings, monkeypatch, gh), runner_bus)
    assert isinstance(terminal, RunFailed), terminal
    assert terminal.reason == Reason.ACCEPTANCE_FAILED
    branch = f"nexus/{config.run_id}"
    assert branch in terminal.message
    assert terminal.detail["acceptance"]["passed"] is False
    assert terminal.detail["pushed"] is True
    result = terminal.detail["result"]
    assert result["pushed"] is True
    assert result["branch"] == branch
    assert result["pr_url"] is None
    assert result["files_changed"] == ["notes.txt"]
    assert result["acceptance"]["passed"] is False
    # The work is on the remote for a person to look at; no PR for failing work.
    assert git(remote, "rev-parse", branch).strip() == result["commit_sha"]
    assert git(remote, "show", f"{branch}:notes.txt") == "add() looks odd\n"
    assert "acceptance tests failing" in git(remote, "log", "-1", "--format=%B", branch)
    assert gh.requests == []


async def test_failing_acceptance_without_push_permission_keeps_the_diff(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    script = [
        Reply(tool_calls=(tc("edit_file", path="calc.py", old="a - b", new="a * b"),)),
        finish("Tried"),
    ]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, repo={"url": str(remote)})
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunFailed), terminal
    assert terminal.reason == Reason.ACCEPTANCE_FAILED
    assert terminal.detail["pushed"] is False
    assert "a * b" in terminal.detail["result"]["details"]["diff"]
    assert "nexus/" not in git(remote, "branch", "--list")


async def test_files_named_with_or_holding_a_secret_in_binary_are_not_pushed(
    bus: Bus,
    runner_bus: Bus,
    settings: RunnerSettings,
    remote: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """write_file keeps its arguments in the workspace; the commit reads names and whole
    blobs (binary too), so neither file reaches the remote, and no record names the value."""
    script = [
        Reply(tool_calls=(tc("write_file", path=f"k-{TOKEN}.txt", content="nothing\n"),)),
        Reply(tool_calls=(tc("write_file", path="blob.bin", content=f"\0\0{TOKEN[::-1]}\0"),)),
        Reply(tool_calls=(tc("write_file", path="notes.txt", content="fine\n"),)),
        finish("Notes"),
    ]
    async with FakeGitHub(token=TOKEN) as gh, FakeOpenAI(script) as llm:
        perms = {"can_commit": True, "can_push": True}
        config = make_config(llm.base_url, repo={"url": str(remote)}, permissions=perms)
        terminal = await execute_run(config, github_settings(settings, monkeypatch, gh), runner_bus)
    assert isinstance(terminal, RunFailed), terminal  # calc's tests fail: the work is pushed
    result = terminal.detail["result"]
    assert result["pushed"] is True
    assert sorted(result["details"]["not_committed"]["files"]) == [
        "blob.bin (a binary file)",
        "k-[REDACTED].txt",
    ]
    branch = f"nexus/{config.run_id}"
    assert git(remote, "ls-tree", "--name-only", branch).split() == [
        ".gitignore", "calc.py", "notes.txt", "pyproject.toml", "test_calc.py",
    ]  # fmt: skip
    published = await everything_published(bus, config.run_id)
    assert TOKEN not in published
    assert TOKEN[::-1] not in published
