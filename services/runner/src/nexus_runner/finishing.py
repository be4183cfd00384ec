"""After `finish`: acceptance tests, commit, push and pull request, and the RunResult."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nexus_events.contract.runstate import RunStatus
from nexus_events.events.runs import Reason, RunConfig, RunResult

from nexus_runner.config import RunnerSettings
from nexus_runner.errors import RunnerError, RunStopped, ToolError
from nexus_runner.plan import READ_TOOLS
from nexus_runner.process import run_process
from nexus_runner.provider import GitProvider
from nexus_runner.safety import redact, truncate
from nexus_runner.tools import ToolContext, detect_test_command
from nexus_runner.tools.args import FinishArgs

# Tools that cannot change the workspace: what plan mode offers, the fixed test command,
# memory and finish.
_NO_WORK_TOOLS = READ_TOOLS | {"run_tests", "remember", "finish"}


def leaves_no_work(config: RunConfig) -> bool:
    """Whether the run can only read (a planner's, reviewer's or tester's): granted no
    built-in that writes or runs a command of its choosing, and no MCP server. Failing tests
    there are the repository's state, not the run's work: acceptance records them, and the
    run still completes (a flow's planner on a repository whose tests fail, its tester
    reporting that they fail)."""
    return not config.mcp_servers and all(g.name in _NO_WORK_TOOLS for g in config.tools)


@dataclass(frozen=True)
class Acceptance:
    command: str | None
    passed: bool | None
    output: str

    def as_dict(self) -> dict[str, Any]:
        return {"command": self.command, "passed": self.passed, "output": self.output}


def configured_test_command(config: RunConfig, settings: RunnerSettings, root: Path) -> str | None:
    """The run's test command: the `run_tests` grant's ``command`` option, else the runner's
    ``acceptance_command``, else detected from the project's files (before the agent ran)."""
    for grant in config.tools:
        command = grant.options.get("command") if grant.name == "run_tests" else None
        if isinstance(command, str) and command.strip():
            return command
    return settings.acceptance_command or detect_test_command(root)


async def run_acceptance(ctx: ToolContext, settings: RunnerSettings) -> Acceptance:
    command = ctx.test_command
    if command is None:
        return Acceptance(None, None, "no test command detected")
    root = ctx.workspace.root
    try:  # in the tools' sandbox, as run_tests: the repository chooses what this runs
        argv, env = ctx.sandbox.shell(
            command, workspace=root, home=ctx.home, cwd=root, egress=ctx.egress
        )
    except ToolError as exc:
        return Acceptance(command, False, str(exc))
    result = await run_process(
        argv, cwd=root, timeout=settings.acceptance_timeout, output_cap=settings.output_cap, env=env
    )
    tail = truncate(ctx.secrets.redact(result.output[-2000:]), 2000)[0]
    return Acceptance(command, result.ok, tail)


async def finish_run(
    config: RunConfig,
    settings: RunnerSettings,
    ctx: ToolContext,
    finished: FinishArgs,
    *,
    branch: str,
    base_sha: str | None,
    base_branch: str | None,
    provider: GitProvider | None,
    guard: Callable[[], None] | None = None,
) -> RunResult:
    """Run acceptance, then commit/push/open a PR as permitted.

    Failing acceptance (unless report-only, or the run `leaves_no_work`) raises `RunStopped`
    with ``acceptance_failed``; the work is still committed and pushed first when permitted, so a
    person can look at the branch, and ``detail["result"]`` says what was pushed. No pull
    request is opened for work that fails its tests. `guard` runs before each side effect
    and raises to stop before it (the run was ended elsewhere meanwhile).

    Secret values of the run stay out of it all: the summary, title and details are
    redacted, a file holding one is not committed, and a branch whose commits hold one
    (say, committed from the shell) is not pushed. The push goes to the run config's URL,
    never through the workspace's git config (`Git.push`).
    """
    check = guard or _no_guard
    perms = config.permissions
    secrets = ctx.secrets
    clean_details = secrets.redact_tree(dict(finished.details))
    assert isinstance(clean_details, dict)
    finished = finished.model_copy(
        update={"summary": secrets.redact_values(finished.summary), "details": clean_details}
    )
    acceptance = await run_acceptance(ctx, settings)
    failed = (
        acceptance.passed is False
        and not settings.acceptance_report_only
        and not leaves_no_work(config)
    )
    title = title_of(finished)
    if perms.can_commit:
        check()
        note = " (acceptance tests failing)" if failed else ""
        sha = await ctx.git.commit(f"{title}\n\nNexus run {config.run_id}{note}")
        if sha is not None:
            ctx.commits.append(sha)
    files, stat = await ctx.git.changes_since(base_sha)
    pushed = False
    pr_url: str | None = None
    details = dict(finished.details)
    if ctx.git.withheld:
        details["not_committed"] = {
            "files": list(ctx.git.withheld),
            "why": "they hold a secret value this run read",
        }
    leaks: list[str] = []
    if perms.can_push and ctx.commits and config.repo is not None:
        leaks = await ctx.git.secret_leaks(base_sha, branch)
        if leaks:
            details["push_refused"] = {
                "leaks": leaks,
                "why": "the commits hold a secret value this run read",
            }
    if perms.can_push and ctx.commits and config.repo is not None and not leaks:
        check()
        await ctx.git.push(config.repo.url, branch, config.run_id)
        pushed = True
        if perms.can_open_pr and provider is not None and not failed:
            remote = config.repo.url
            check()
            try:
                pr_url = await provider.open_pull_request(
                    remote, branch, base_branch or "main", title, finished.summary
                )
            except RunnerError as exc:
                details["pr_error"] = redact(str(exc))
    if not pushed:
        diff = truncate(redact(await ctx.git.diff()), 20_000)[0]
        if diff:
            details["diff"] = diff
    result = RunResult(
        summary=finished.summary,
        branch=branch if config.repo is not None else None,
        commit_sha=ctx.commits[-1] if ctx.commits else None,
        pr_url=pr_url,
        diff_stat=stat or None,
        files_changed=files,
        tests_passed=acceptance.passed if acceptance.passed is not None else ctx.tests_passed,
        details=details,
        commits=list(ctx.commits),
        pushed=pushed,
        acceptance=acceptance.as_dict(),
    )
    if failed:
        raise RunStopped(
            RunStatus.FAILED,
            Reason.ACCEPTANCE_FAILED,
            f"acceptance tests failed: {acceptance.command}"
            + (f" (work pushed to {branch})" if pushed else ""),
            {
                "acceptance": acceptance.as_dict(),
                "pushed": pushed,
                "result": result.model_dump(mode="json"),
            },
        )
    return result


def title_of(finished: FinishArgs) -> str:
    lines = finished.summary.strip().splitlines()
    return (lines[0] if lines else "Nexus run")[:72]


def _no_guard() -> None:
    return None
