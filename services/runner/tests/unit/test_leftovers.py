"""Clearing a dead attempt's workspace: everything beneath it goes, nothing a link points to,
whatever modes the attempt's tools left."""

from __future__ import annotations

import os
from pathlib import Path

from nexus_runner.leftovers import clear_workspace


def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside"
    (target / "sub").mkdir(parents=True)
    (target / "keep.txt").write_text("keep")
    return target


def test_a_left_workspace_is_emptied_links_removed_as_links(tmp_path: Path) -> None:
    target = outside(tmp_path)
    ws = tmp_path / "ws"
    (ws / ".git" / "objects").mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "src" / "locked" / "deep").mkdir(parents=True)
    (ws / "src" / "locked" / "deep" / "f.txt").write_text("x")
    (ws / "file.txt").write_text("y")
    os.symlink(target, ws / "to-dir")
    os.symlink(target / "keep.txt", ws / "src" / "to-file")
    os.chmod(ws / "src" / "locked" / "deep", 0)  # unreadable to its owner
    os.chmod(ws / "src" / "locked", 0o500)  # entries not removable
    os.chmod(ws / ".git", 0o555)
    os.chmod(target, 0o755)

    assert clear_workspace(ws) is True
    assert ws.is_dir()  # kept: in a confined runner it is a bind mount
    assert os.listdir(ws) == []
    assert sorted(os.listdir(target)) == ["keep.txt", "sub"]
    assert (target / "keep.txt").read_text() == "keep"
    assert oct(target.stat().st_mode & 0o777) == oct(0o755)  # no mode changed out there
    assert clear_workspace(ws) is False  # empty: nothing more


def test_a_link_planted_as_the_workspace_is_unlinked_never_followed(tmp_path: Path) -> None:
    target = outside(tmp_path)
    ws = tmp_path / "ws"
    os.symlink(target, ws)
    assert clear_workspace(ws) is True
    assert not os.path.lexists(ws)
    assert sorted(os.listdir(target)) == ["keep.txt", "sub"]
    # A file there, or nothing at all.
    ws.write_text("not a directory")
    assert clear_workspace(ws) is True
    assert not os.path.lexists(ws)
    assert clear_workspace(ws) is False
