"""The diff of a run's pushed branch against its base, fetched with git into a bare cache
repository per remote: what a reviewer of the branch would see, read from the remote (the
console never reads a run's workspace or checkpoints)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Most bytes of patch a page shows; the rest is cut, and the page says so.
MAX_PATCH = 400_000


@dataclass(frozen=True)
class BranchDiff:
    """The stat and patch of `branch` against its merge base with `base`, or why none."""

    stat: str = ""
    patch: str = ""
    cut: bool = False
    unavailable: str | None = None


class GitFailedError(Exception):
    pass


def _git_env() -> dict[str, str]:
    # Never ask anyone anything: no terminal prompts, no askpass, no credential helpers.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true", SSH_ASKPASS="true")
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


async def _git(repo: Path, *args: str, limit: float) -> str:
    proc = await asyncio.create_subprocess_exec(
        "git", "-C", str(repo), "-c", "credential.helper=", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_git_env(),
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise GitFailedError(f"git {args[0]} took more than {limit:.0f} s") from None
    if proc.returncode != 0:
        last = (err.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        raise GitFailedError(f"git {args[0]}: {last[:300]}")
    return out.decode(errors="replace")


def cache_dir(configured: Path | None) -> Path:
    return configured or Path(tempfile.gettempdir()) / "nexus-console-git"


async def branch_diff(
    url: str, base: str | None, branch: str, *, cache: Path, limit: float
) -> BranchDiff:
    """Fetch `base` (the remote's default branch when None) and `branch` from `url`, then
    diff `branch` against their merge base."""
    repo = cache / hashlib.sha256(url.encode()).hexdigest()[:24]
    try:
        if not (repo / "HEAD").exists():
            repo.mkdir(parents=True, exist_ok=True)
            await _git(repo, "init", "--quiet", "--bare", limit=limit)
        base_ref = base or "HEAD"
        await _git(
            repo, "fetch", "--quiet", "--no-tags", "--force", url,
            f"+{base_ref}:refs/nexus/base", f"+refs/heads/{branch}:refs/nexus/work",
            limit=limit,
        )  # fmt: skip
        merge_base = (
            await _git(repo, "merge-base", "refs/nexus/base", "refs/nexus/work", limit=limit)
        ).strip()
        stat = await _git(repo, "diff", "--stat", merge_base, "refs/nexus/work", limit=limit)
        patch = await _git(repo, "diff", merge_base, "refs/nexus/work", limit=limit)
    except (GitFailedError, OSError) as exc:
        return BranchDiff(unavailable=f"the repository could not be read from the console: {exc}")
    cut = len(patch) > MAX_PATCH
    return BranchDiff(stat=stat, patch=patch[:MAX_PATCH], cut=cut)
