"""A resumed attempt pushes over its own run's earlier push, never over anyone else's commit.

Attempt 1 commits and pushes, then dies before its end is recorded; attempt 2 restores the
checkpoint taken before that push, redoes the work and commits again on the same base: its
push is not a fast-forward of the branch attempt 1 left.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus_runner.errors import ToolError
from nexus_runner.git import Author, Git

from .git_repos import bare_origin, sh

RUN = "run-7f3a"


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    return bare_origin(tmp_path)


async def clone(root: Path, origin: Path) -> Git:
    """A workspace on the run's branch, cloned before anything was pushed to it (as the
    checkpoint attempt 2 restores was)."""
    git = Git(root, Author("nexus", "nexus@x"))
    await git.clone(str(origin), "main", f"nexus/{RUN}")
    return git


async def commit(git: Git, text: str, message: str) -> Git:
    (git.root / "fix.txt").write_text(text)
    assert await git.commit(message) is not None
    return git


async def test_a_resumed_attempt_replaces_its_own_earlier_push(
    tmp_path: Path, origin: Path
) -> None:
    first, second = await clone(tmp_path / "a1", origin), await clone(tmp_path / "a2", origin)
    await commit(first, "one\n", f"Fix\n\nNexus run {RUN}")
    await first.push(str(origin), f"nexus/{RUN}", RUN)
    await commit(second, "two\n", f"Fix again\n\nNexus run {RUN}")
    pushed = await second.push(str(origin), f"nexus/{RUN}", RUN)
    assert sh(origin, "rev-parse", f"refs/heads/nexus/{RUN}").strip() == pushed
    assert sh(origin, "show", f"nexus/{RUN}:fix.txt") == "two\n"


@pytest.mark.parametrize(
    "tip_message",
    [
        "A person's commit",
        f"Fix\n\nNexus run {RUN}0",  # another run whose id starts with this one's
        "Fix\n\nNexus run run-other",
    ],
)
async def test_a_branch_holding_anyone_elses_tip_refuses_the_push(
    tmp_path: Path, origin: Path, tip_message: str
) -> None:
    other, mine = await clone(tmp_path / "other", origin), await clone(tmp_path / "mine", origin)
    await commit(other, "theirs\n", tip_message)
    theirs = await other.push(str(origin), f"nexus/{RUN}")
    await commit(mine, "mine\n", f"Fix\n\nNexus run {RUN}")
    with pytest.raises(ToolError, match="git push failed"):
        await mine.push(str(origin), f"nexus/{RUN}", RUN)
    assert sh(origin, "rev-parse", f"refs/heads/nexus/{RUN}").strip() == theirs


async def test_without_a_run_id_a_diverged_branch_refuses_the_push(
    tmp_path: Path, origin: Path
) -> None:
    first, second = await clone(tmp_path / "a1", origin), await clone(tmp_path / "a2", origin)
    await commit(first, "one\n", f"Fix\n\nNexus run {RUN}")
    await first.push(str(origin), f"nexus/{RUN}")
    await commit(second, "two\n", f"Fix\n\nNexus run {RUN}")
    with pytest.raises(ToolError, match="rejected"):
        await second.push(str(origin), f"nexus/{RUN}")
