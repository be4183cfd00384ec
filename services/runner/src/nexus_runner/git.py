"""The git CLI, asynchronously: clone, branch, status, diff, commit, push."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from nexus_runner.errors import ToolError
from nexus_runner.process import ProcessResult, run_process, scrubbed_env
from nexus_runner.safety import SecretRegistry

# Seconds for one git command (a clone of a big repository takes longest).
GIT_TIMEOUT = 600.0
GIT_OUTPUT_CAP = 1_000_000
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# Settings a repository's own config (which the agent can edit) must not change for the
# runner's git: hooks and the fsmonitor would run commands, signing would run gpg.
_OVERRIDES = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "commit.gpgSign=false")
# What the final push reads besides its own staging repository: nothing the agent can write.
# (Global config would be the run's HOME, which the agent's shell commands can write.)
_PUSH_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


@dataclass(frozen=True)
class Author:
    name: str
    email: str


class Git:
    """git commands in one working tree."""

    def __init__(self, root: Path, author: Author, secrets: SecretRegistry | None = None) -> None:
        self.root = root
        self.author = author
        # Commits never take a secret value of the run (message redacted, file withheld).
        self.secrets = secrets if secrets is not None else SecretRegistry()
        self.withheld: list[str] = []  # files not committed: they hold a secret value

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return scrubbed_env(
            {
                "GIT_AUTHOR_NAME": self.author.name,
                "GIT_AUTHOR_EMAIL": self.author.email,
                "GIT_COMMITTER_NAME": self.author.name,
                "GIT_COMMITTER_EMAIL": self.author.email,
                **(extra or {}),
            }
        )

    async def run(
        self,
        *args: str,
        check: bool = True,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> ProcessResult:
        overrides = [part for item in _OVERRIDES for part in ("-c", item)]
        result = await run_process(
            ["git", *overrides, *args],
            cwd=cwd or self.root,
            timeout=GIT_TIMEOUT,
            output_cap=GIT_OUTPUT_CAP,
            env=self._env(env),
        )
        if check and not result.ok:
            raise ToolError(f"git {args[0]} failed: {result.output.strip()[-2000:]}")
        return result

    async def clone(
        self, url: str, ref: str | None, branch: str, remote: str = "origin"
    ) -> str | None:
        """Clone `url` into the root, check out `ref` (default branch if None), then `branch`.

        When the remote already has `branch` (an earlier attempt of the run pushed it), the
        work continues from there so a later push fast-forwards. Returns the base commit
        (`ref`'s), against which the run's changes are measured.
        """
        self.root.parent.mkdir(parents=True, exist_ok=True)
        await self.run(
            "clone", "--quiet", "--origin", remote, url, str(self.root), cwd=self.root.parent
        )
        if ref:
            await self.run("checkout", "--quiet", ref)
        base = await self.head()  # None for an empty repository
        existing = f"refs/remotes/{remote}/{branch}"
        if (await self.run("rev-parse", "--verify", "--quiet", existing, check=False)).ok:
            await self.run("checkout", "--quiet", "-B", branch, existing)
        else:
            await self.run("checkout", "--quiet", "-B", branch)
        return base

    async def head(self) -> str | None:
        result = await self.run("rev-parse", "HEAD", check=False)
        return result.output.strip() if result.ok else None

    async def status(self) -> str:
        return (await self.run("status", "--short", "--branch")).output

    async def diff(self, staged: bool = False, path: str | None = None) -> str:
        args = ["diff", "--no-color"] + (["--cached"] if staged else [])
        return (await self.run(*args, *(["--", path] if path else []))).output

    async def commit(self, message: str, paths: list[str] | None = None) -> str | None:
        """Stage `paths` (all changes if None) and commit; the new sha, or None if nothing to do.

        Files whose added lines hold a secret value of the run are unstaged and listed in
        `withheld`; the message is committed with secret values redacted.
        """
        await self.run("add", "--all", *(["--", *paths] if paths else []))
        leaking = await self._files_with_secrets("--cached")
        if leaking:
            head = await self.head()
            for path in leaking:
                undo = ("reset", "-q", "--", path) if head else ("rm", "--cached", "-q", "--", path)
                await self.run(*undo)
            self.withheld = sorted(set(self.withheld) | set(leaking))
        if (await self.run("diff", "--cached", "--quiet", check=False)).ok:
            return None
        await self.run("commit", "--quiet", "-m", self.secrets.redact_values(message))
        return await self.head()

    def withheld_note(self) -> str:
        if not self.withheld:
            return ""
        return "; not committed, they hold a secret value this run read: " + ", ".join(
            self.withheld
        )

    async def _files_with_secrets(self, *diff_args: str) -> list[str]:
        """Files whose added lines (in ``git diff <diff_args>``) hold a secret value."""
        if not len(self.secrets):
            return []
        plain = ("--no-color", "--no-ext-diff", "--no-textconv", "-U0")
        diff = (await self.run("diff", *plain, *diff_args)).output
        found: set[str] = set()
        current = ""
        for line in diff.splitlines():
            if line.startswith("+++ "):
                current = line[4:].removeprefix("b/")
            elif line.startswith("+") and self.secrets.contains(line[1:]):
                found.add(current)
        return sorted(found)

    async def secret_leaks(self, base: str | None) -> list[str]:
        """What of the commits since `base` holds a secret value: files and commit messages
        (also commits made from the shell, which `commit` did not see)."""
        span = f"{base}..HEAD" if base else "HEAD"
        leaks = await self._files_with_secrets(base or EMPTY_TREE, "HEAD")
        log = (await self.run("log", "--format=%H %B", span, check=False)).output
        if self.secrets.contains(log):
            leaks.append("(a commit message)")
        return leaks

    async def changes_since(self, base: str | None) -> tuple[list[str], str]:
        """Files changed and the diff stat of the work tree against `base` (commits included)."""
        target = [base] if base else []
        names = (await self.run("diff", "--name-only", *target)).output.split()
        untracked = (await self.run("ls-files", "--others", "--exclude-standard")).output.split()
        stat = (await self.run("diff", "--stat", *target)).output.strip()
        return sorted(set(names) | set(untracked)), stat

    async def push(self, url: str, branch: str) -> str:
        """Push HEAD to `branch` of `url`; the sha pushed.

        Never through the workspace's repository, whose config the agent can edit
        (``remote.*.pushurl``, ``url.*.insteadOf``, ``core.sshCommand``, credential
        helpers, remotes of its own): HEAD is fetched into a new bare repository in a
        private temporary directory (created now: nothing the agent ran could prepare it),
        and pushed from there to the URL of the run's config, with global and system config
        off.
        """
        sha = await self.head()
        if sha is None:
            raise ToolError("git push failed: nothing committed")
        ref = f"refs/heads/{branch}"
        with tempfile.TemporaryDirectory(prefix="nexus-push-") as tmp:
            staging = Path(tmp)
            await self.run("init", "--quiet", "--bare", tmp, cwd=staging, env=_PUSH_ENV)
            await self.run(
                "fetch", "--quiet", "--no-tags", str(self.root), f"+{sha}:{ref}",
                cwd=staging, env=_PUSH_ENV,
            )  # fmt: skip
            await self.run("push", "--quiet", url, f"{ref}:{ref}", cwd=staging, env=_PUSH_ENV)
        return sha
