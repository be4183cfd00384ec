"""``python -m nexus_runner --warm`` before any run (docs/warm-starts.md): discarded (EOF on
stdin) it exits 0 quietly; a malformed handoff is one line on stderr and exit 2, never a
traceback nor a run."""

from __future__ import annotations

import subprocess
import sys

import pytest

WARM = [sys.executable, "-m", "nexus_runner", "--warm"]


def _warm(stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": "/usr/bin:/bin", "NEXUS_NATS_URL": "nats://127.0.0.1:1"}  # never dialled
    return subprocess.run(WARM, input=stdin, capture_output=True, timeout=60, env=env, check=False)


def test_eof_without_a_handoff_exits_0_quietly() -> None:
    done = _warm(b"")
    assert done.returncode == 0
    assert done.stderr == b""
    assert done.stdout == b""


@pytest.mark.parametrize(
    "line",
    [b"not json\n", b'{"config": {"run_id": "r"}}\n', b'{"config": null, "extra": 1}\n'],
)
def test_a_malformed_handoff_is_one_line_and_exit_2(line: bytes) -> None:
    done = _warm(line)
    assert done.returncode == 2
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("nexus-runner --warm: malformed handoff")
