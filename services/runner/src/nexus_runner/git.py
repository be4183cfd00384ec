"""The git CLI, asynchronously: clone, branch, status, diff, commit, push."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nexus_runner.errors import ToolError
from nexus_runner.process import ProcessResult, run_process, scrubbed_env

# Seconds for one git command (a clone of a big repository takes longest).
GIT_TIMEOUT = 600.0
GIT_OUTPUT_CAP = 1_000_000


@dataclass(frozen=True)
class Author:
    name: str
    email: str


class Git:
    """git commands in one working tree."""

    def __init__(self, root: Path, author: Author) -> None:
        self.root = root
        self.author = author

    def _env(self) -> dict[str, str]:
        return scrubbed_env(
            {
                "GIT_AUTHOR_NAME": self.author.name,
                "GIT_AUTHOR_EMAIL": self.author.email,
                "GIT_COMMITTER_NAME": self.author.name,
                "GIT_COMMITTER_EMAIL": self.author.email,
            }
        )

    async def run(self, *args: str, check: bool = True, cwd: Path | None = None) -> ProcessResult:
        result = await run_process(
            ["git", "-c", "core.hooksPath=/dev/null", *args],
            cwd=cwd or self.root,
            timeout=GIT_TIMEOUT,
            output_cap=GIT_OUTPUT_CAP,
            env=self._env(),
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
        """Stage `paths` (all changes if None) and commit; the new sha, or None if nothing to do."""
        await self.run("add", "--all", *(["--", *paths] if paths else []))
        if (await self.run("diff", "--cached", "--quiet", check=False)).ok:
            return None
        await self.run("commit", "--quiet", "-m", message)
        return await self.head()

    async def changes_since(self, base: str | None) -> tuple[list[str], str]:
        """Files changed and the diff stat of the work tree against `base` (commits included)."""
        target = [base] if base else []
        names = (await self.run("diff", "--name-only", *target)).output.split()
        untracked = (await self.run("ls-files", "--others", "--exclude-standard")).output.split()
        stat = (await self.run("diff", "--stat", *target)).output.strip()
        return sorted(set(names) | set(untracked)), stat

    async def push(self, remote: str, branch: str) -> None:
        await self.run("push", "--quiet", remote, f"HEAD:refs/heads/{branch}")

    async def remote_url(self, remote: str) -> str | None:
        result = await self.run("remote", "get-url", remote, check=False)
        return result.output.strip() if result.ok else None
