"""Git repositories for the runner's git tests: the git CLI with a fixed identity, and a
one-commit bare origin to clone."""

from __future__ import annotations

import subprocess
from pathlib import Path


def sh(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    """`git ARGS` in `cwd`, as a person at a shell would run it (no global config)."""
    env = {
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x", "PATH": "/usr/bin:/bin", "HOME": str(cwd),
    }  # fmt: skip
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, input=stdin
    ).stdout.decode()


def bare_origin(tmp_path: Path, name: str = "origin.git") -> Path:
    """A bare repository under `tmp_path` whose ``main`` holds one commit (``a.txt``)."""
    src = tmp_path / "src"
    src.mkdir()
    sh(src, "init", "-q", "-b", "main")
    (src / "a.txt").write_text("a\n")
    sh(src, "add", "-A")
    sh(src, "commit", "-q", "-m", "init")
    origin = tmp_path / name
    sh(tmp_path, "clone", "-q", "--bare", str(src), str(origin))
    return origin
