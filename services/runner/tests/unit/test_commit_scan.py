"""The push check reads what a push sends (every new object whole, names, messages, the ref,
replace refs ignored), commits withhold by name and whole content, and none of the runner's
git commands runs a program the workspace's repository config names. Real git throughout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nexus_runner.git import Author, Git
from nexus_runner.safety import SecretRegistry

from .git_repos import bare_origin, sh

SECRET = "hT9-wq2Lz-0pXv7-kRm4"  # no known key shape: only tracking can catch it
BRANCH = "nexus/r1"


async def workspace(tmp_path: Path) -> tuple[Git, Path, str]:
    """A clone of a one-commit origin, as a run has it: (git, origin, base commit)."""
    origin = bare_origin(tmp_path)
    git = Git(tmp_path / "runs" / "ws", Author("a", "a@x"), SecretRegistry([SECRET]))
    base = await git.clone(str(origin), None, BRANCH)
    assert base is not None
    return git, origin, base


def commit_from_shell(ws: Path, message: str = "work") -> None:
    """What the agent's shell can do: stage everything and commit, past the runner."""
    sh(ws, "add", "-A")
    sh(ws, "commit", "-q", "--no-verify", "-m", message)


async def test_a_secret_in_a_file_name_refuses_the_push(tmp_path: Path) -> None:
    git, _, base = await workspace(tmp_path)
    (git.root / "docs").mkdir()
    (git.root / "docs" / f"key-{SECRET}.txt").write_text("nothing secret inside\n")
    commit_from_shell(git.root)
    leaks = await git.secret_leaks(base, BRANCH)
    assert any(leak.startswith("a file name: docs/") for leak in leaks), leaks
    assert not any(SECRET in leak for leak in leaks)  # the report does not carry it


async def test_a_secret_in_a_binary_file_refuses_the_push(tmp_path: Path) -> None:
    git, _, base = await workspace(tmp_path)
    (git.root / "blob.bin").write_bytes(b"\x00\x01\xff\xfe" * 100 + SECRET.encode() + b"\x00")
    commit_from_shell(git.root)
    assert await git.secret_leaks(base, BRANCH) == ["blob.bin (a binary file)"]


async def test_a_secret_after_a_large_diff_refuses_the_push(tmp_path: Path) -> None:
    git, _, base = await workspace(tmp_path)
    (git.root / "big.txt").write_text("filler line of text\n" * 60_000)  # 1.2 MB
    (git.root / "zz-last.txt").write_text(f"token {SECRET}\n")
    commit_from_shell(git.root)
    assert await git.secret_leaks(base, BRANCH) == ["zz-last.txt"]


async def test_a_secret_deep_in_one_large_file_refuses_the_push(tmp_path: Path) -> None:
    """Past the first chunk the scanner reads, and straddling two chunks."""
    git, _, base = await workspace(tmp_path)
    filler = b"x" * ((1 << 20) - 7)
    (git.root / "huge.txt").write_bytes(filler + SECRET.encode() + b"\n" + filler)
    commit_from_shell(git.root)
    assert await git.secret_leaks(base, BRANCH) == ["huge.txt"]


async def test_a_secret_in_a_no_diff_file_refuses_the_push(tmp_path: Path) -> None:
    git, _, base = await workspace(tmp_path)
    (git.root / ".gitattributes").write_text("*.cfg -diff\n")
    (git.root / "app.cfg").write_text(f"key = {SECRET}\n")
    commit_from_shell(git.root)
    assert await git.secret_leaks(base, BRANCH) == ["app.cfg"]


async def test_a_secret_on_a_line_starting_with_plus_plus_refuses_the_push(
    tmp_path: Path,
) -> None:
    git, _, base = await workspace(tmp_path)
    (git.root / "notes.md").write_text(f"++ {SECRET}\n")
    commit_from_shell(git.root)
    assert await git.secret_leaks(base, BRANCH) == ["notes.md"]


async def test_a_secret_in_a_commit_message_refuses_the_push(tmp_path: Path) -> None:
    git, _, base = await workspace(tmp_path)
    (git.root / "b.txt").write_text("b\n")
    commit_from_shell(git.root, f"work\n\nsee {SECRET[::-1]}")
    assert await git.secret_leaks(base, BRANCH) == ["(a commit message or author)"]


async def test_a_secret_in_the_branch_name_refuses_the_push(tmp_path: Path) -> None:
    git, _, base = await workspace(tmp_path)
    (git.root / "b.txt").write_text("b\n")
    commit_from_shell(git.root)
    assert await git.secret_leaks(base, f"nexus/{SECRET}") == ["(the branch name)"]
    assert await git.secret_leaks(base, BRANCH) == []


async def test_a_commit_hidden_behind_a_replace_ref_refuses_the_push(tmp_path: Path) -> None:
    """The push sends the real commit, not its replacement: so does the check."""
    git, origin, base = await workspace(tmp_path)
    ws = git.root
    (ws / "leak.txt").write_text(f"{SECRET}\n")
    commit_from_shell(ws)
    real = sh(ws, "rev-parse", "HEAD").strip()
    # A clean look-alike of the same commit, and a replace ref that shows it instead.
    (ws / "leak.txt").write_text("nothing here\n")
    sh(ws, "add", "-A")
    tree = sh(ws, "write-tree").strip()
    fake = sh(ws, "commit-tree", tree, "-p", base, "-m", "work").strip()
    sh(ws, "replace", real, fake)
    sh(ws, "checkout", "-q", "--", ".")
    assert SECRET not in sh(ws, "show", "HEAD")  # what git shows honours the replacement
    assert await git.secret_leaks(base, BRANCH) == ["leak.txt"]
    # The push (were it made) sends the real commit: check and push agree.
    pushed = await git.push(str(origin), BRANCH)
    assert pushed == real
    assert SECRET in sh(origin, "show", f"{real}:leak.txt")


async def test_a_clean_push_reads_as_clean(tmp_path: Path) -> None:
    git, _, base = await workspace(tmp_path)
    (git.root / "b.txt").write_text("ordinary 115 107 45 text, 73:6b and H4sIAAAAAAAA\n")
    (git.root / "c.bin").write_bytes(bytes(range(256)) * 40)
    commit_from_shell(git.root)
    assert await git.secret_leaks(base, BRANCH) == []


async def test_a_commit_withholds_files_named_with_or_holding_a_secret_in_binary(
    tmp_path: Path,
) -> None:
    git, _, _ = await workspace(tmp_path)
    (git.root / f"k-{SECRET}").write_text("x\n")
    (git.root / "data.bin").write_bytes(b"\x00\x00" + SECRET.encode()[::-1] + b"\x00")
    (git.root / ".gitattributes").write_text("*.cfg -diff\n")
    (git.root / "app.cfg").write_text(f"{SECRET}\n")
    (git.root / "ok.txt").write_text("fine\n")
    sha = await git.commit("work")
    assert sha is not None
    committed = sh(git.root, "show", "--name-only", "--format=", "HEAD").split()
    assert sorted(committed) == [".gitattributes", "ok.txt"]
    assert git.withheld == ["app.cfg", "data.bin (a binary file)", "k-[REDACTED]"]


def plant_programs(ws: Path, marker: Path) -> None:
    """Everything a repository's config or attributes can name for git to run."""
    touch = f"touch {marker}"
    (ws / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
    hooks = ws / ".git" / "evil-hooks"
    hooks.mkdir()
    for name in ("pre-commit", "post-commit", "commit-msg", "pre-push", "reference-transaction",
                 "post-checkout", "post-index-change", "pre-auto-gc"):  # fmt: skip
        for where in (hooks, ws / ".git" / "hooks"):
            (where / name).write_text(f"#!/bin/sh\n{touch}\n")
            os.chmod(where / name, 0o755)
    for key, value in (
        ("core.hooksPath", str(hooks)),
        ("core.fsmonitor", touch),
        ("filter.evil.clean", f"{touch}; cat"),
        ("filter.evil.smudge", f"{touch}; cat"),
        ("filter.evil.process", touch),
        ("filter.evil.required", "true"),
        ("diff.evil.textconv", f"sh -c '{touch}; cat \"$0\"'"),
        ("diff.evil.command", touch),
        ("diff.external", touch),
        ("core.pager", touch),
        ("gc.auto", "1"),
        ("commit.gpgSign", "true"),
        ("gpg.program", touch),
    ):
        sh(ws, "config", key, value)


async def test_the_runners_git_runs_nothing_the_repository_names(tmp_path: Path) -> None:
    git, origin, base = await workspace(tmp_path)
    marker = tmp_path / "ran"
    plant_programs(git.root, marker)
    (git.root / "b.txt").write_text("b\n")
    (git.root / "a.txt").write_text("changed\n")
    await git.status()
    await git.diff()
    sha = await git.commit("work")
    assert sha is not None
    assert await git.secret_leaks(base, BRANCH) == []
    await git.diff(staged=True)
    await git.changes_since(base)
    assert await git.push(str(origin), BRANCH) == sha
    assert not marker.exists()
    # The content went in as it is (no clean filter ran over it).
    assert sh(origin, "show", f"{sha}:b.txt") == "b\n"


async def test_filters_planted_after_the_runners_git_ran_are_still_blanked(
    tmp_path: Path,
) -> None:
    """The filter listing is kept while the config's bytes stay the same (one git process a
    command, not two); a config changed since, in place too, is listed again."""
    git, origin, _ = await workspace(tmp_path)
    listings: list[Path] = []
    real_list = git._listed_filters

    async def counting(cwd: Path) -> tuple[str, ...]:
        listings.append(cwd)
        return await real_list(cwd)

    git._listed_filters = counting  # type: ignore[method-assign]
    for _ in range(3):
        await git.status()
    assert len(listings) <= 1  # the config unchanged since the clone: listed once at most
    before = len(listings)
    marker = tmp_path / "ran"
    plant_programs(git.root, marker)
    (git.root / "b.txt").write_text("b\n")
    await git.status()
    assert len(listings) == before + 1
    sha = await git.commit("work")
    assert sha is not None
    assert not marker.exists()

    # An edit in place that keeps the size and the times: the bytes differ, so listed again.
    config = git.root / ".git" / "config"
    text = config.read_text()
    times = config.stat()
    config.write_text(text.replace('filter "evil"', 'filter "evIl"'))
    os.utime(config, ns=(times.st_atime_ns, times.st_mtime_ns))
    # The attributes name the renamed driver: a listing kept from before would not blank it.
    (git.root / ".gitattributes").write_text("* filter=evIl\n")
    (git.root / "c.txt").write_text("c\n")
    assert await git.commit("more") is not None
    assert len(listings) >= before + 2
    assert not marker.exists()
    assert await git.push(str(origin), BRANCH) is not None
    assert not marker.exists()


async def test_a_config_that_includes_another_is_listed_for_every_command(
    tmp_path: Path,
) -> None:
    git, _, _ = await workspace(tmp_path)
    included = tmp_path / "more.cfg"
    included.write_text("")
    sh(git.root, "config", "include.path", str(included))
    listings: list[Path] = []
    real_list = git._listed_filters

    async def counting(cwd: Path) -> tuple[str, ...]:
        listings.append(cwd)
        return await real_list(cwd)

    git._listed_filters = counting  # type: ignore[method-assign]
    await git.status()
    # A filter defined in the included file only: the config's own bytes do not change.
    marker = tmp_path / "ran"
    included.write_text(f'[filter "evil"]\n\tclean = touch {marker}; cat\n\trequired = true\n')
    (git.root / ".gitattributes").write_text("* filter=evil\n")
    (git.root / "b.txt").write_text("b\n")
    assert await git.commit("work") is not None
    assert not marker.exists()
    assert len(listings) >= 2


@pytest.mark.parametrize("size", [0, 1, 8000])
async def test_odd_sized_blobs_are_read_whole(tmp_path: Path, size: int) -> None:
    git, _, base = await workspace(tmp_path)
    (git.root / "odd").write_bytes(b"\n" * size)
    (git.root / "z").write_text(SECRET)
    commit_from_shell(git.root)
    assert await git.secret_leaks(base, BRANCH) == ["z"]
