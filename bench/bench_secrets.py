"""The secret scanner's cost: a run's tracked values looked for in every shape.

- a call's arguments (200 B) checked before it runs (`holds_piece`: shapes and pieces);
- a tool output (20 KB of Python source) redacted before the model and the events see it;
- the push check (`Git.secret_leaks`) over a commit of 400 files (8 MB, a 4 MB binary
  among them), every object read whole through ``git cat-file --batch``.

50 tracked values of 32 random characters (a runner's settings, a `.env`, a few outputs).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path

from nexus_runner.git import Author, Git
from nexus_runner.safety import SecretRegistry

VALUES = 50
ROUNDS = 50
SOURCE = Path(__file__).resolve().parents[1] / "services/runner/src/nexus_runner/loop.py"


def _per_call(fn: object, text: str, rounds: int) -> float:
    assert callable(fn)
    fn(text)  # warm up
    start = time.perf_counter()
    for _ in range(rounds):
        fn(text)
    return (time.perf_counter() - start) / rounds * 1e3


def _repo(root: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}  # fmt: skip
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    (root / "a").write_text("a\n")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "base"], check=True, env=env)
    base = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    text = SOURCE.read_text()[:10_000]
    for i in range(400):
        (root / f"f{i:03}.py").write_text(f"# {i}\n{text}")
    (root / "blob.bin").write_bytes(os.urandom(4_000_000))
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "work"], check=True, env=env)
    return base


async def run() -> list[tuple[str, float, str, float]]:
    registry = SecretRegistry(secrets.token_urlsafe(24) for _ in range(VALUES))
    call = '{"command": "ls -la src && git status && grep -rn foo ."}' * 4
    output = SOURCE.read_text()[:20_000]
    args_ms = _per_call(registry.holds_piece, call, ROUNDS * 10)
    output_ms = _per_call(registry.redact_values, output, ROUNDS)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = _repo(root)
        git = Git(root, Author("b", "b@x"), registry)
        start = time.perf_counter()
        leaks = await git.secret_leaks(base, "nexus/bench")
        push_ms = (time.perf_counter() - start) * 1e3
        assert leaks == [], leaks
    return [
        ("a call's arguments (200 B) checked, ms", args_ms, "", 0.0),
        ("a tool output (20 KB) redacted, ms", output_ms, "", 0.0),
        ("push check of 400 files + 4 MB binary (8 MB), ms", push_ms, "", 0.0),
    ]
