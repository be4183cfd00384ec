"""The checkpointer's change check after a call: one git process when nothing changed, and
every change still seen (the tree it gives is always `git write-tree`'s)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, cast

from nexus_runner.checkpoint import Checkpointer
from nexus_runner.git import Author, Git
from nexus_runner.publisher import RunPublisher

from .git_repos import sh


class _Run:
    run_id = "run-check"
    attempt = 1


def _checkpointer(root: Path) -> tuple[Checkpointer, list[tuple[str, ...]]]:
    git = Git(root, Author("a", "a@x"))
    ran: list[tuple[str, ...]] = []
    real_run = git.run

    async def recording_run(*args: str, **kw: Any) -> Any:
        ran.append(args)
        return await real_run(*args, **kw)

    git.run = recording_run  # type: ignore[method-assign]
    # The change check reaches neither JetStream nor the publisher (only a checkpoint does).
    return Checkpointer(git, cast(Any, None), cast(RunPublisher, _Run()), base_sha=None), ran


def _tree_of(root: Path) -> str:
    """The workspace's tree as a fresh index sees it (no stat cache to trust)."""
    index = root.parent / "fresh-index"
    index.unlink(missing_ok=True)
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    subprocess.run(["git", "add", "-A"], cwd=root, env=env, check=True)
    out = subprocess.run(["git", "write-tree"], cwd=root, env=env, check=True, capture_output=True)
    return out.stdout.decode().strip()


async def test_an_unchanged_workspace_costs_one_git_process_and_changes_are_seen(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    sh(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("one\n")
    # Older than the index: not "racily clean" (git then rewrites its index, to no harm).
    old = os.stat(root / "a.txt").st_mtime - 10
    os.utime(root / "a.txt", (old, old))
    checkpointer, ran = _checkpointer(root)
    try:
        await checkpointer.start()
        assert checkpointer.last_tree == _tree_of(root)
        for _ in range(3):  # nothing written: `git add` only, the same tree
            ran.clear()
            assert await checkpointer._tree() == checkpointer.last_tree
        assert [args[0] for args in ran] == ["add"]

        # Changes of every kind, right after the check (the same second as the index: git's
        # racy case, a change of content of the same size included): each is a new tree.
        seen = {checkpointer.last_tree}
        changes = [
            lambda: (root / "a.txt").write_text("two\n"),  # same size
            lambda: (root / "b.txt").write_text("b\n"),
            (root / "a.txt").unlink,
            (root / "d").mkdir,  # an empty directory is no change of the tree
            lambda: (root / "d" / "c.txt").write_text("c\n"),
            lambda: (root / "d" / "c.txt").chmod(0o755),
        ]
        for change in changes:
            change()
            tree = await checkpointer._tree()
            assert tree == _tree_of(root)
            if change is changes[3]:
                assert tree in seen
                continue
            assert tree not in seen
            seen.add(tree)
            assert await checkpointer._tree() == tree  # and unchanged again after it
    finally:
        checkpointer.close()
