"""The MongoDB server of the catalog backend tests, chosen once per test process.

The server ``NEXUS_TEST_MONGODB_URL`` names, else a SecantusDB server (``secantusd-py
--storage-path :memory:``, a MongoDB wire-protocol server on WiredTiger from the `secantusdb`
dev dependency) started on a free port for the session. No in-process double stands in: when
neither is there, the MongoDB tests fail with the reason. The choice is decided when first
asked (at collection: the test ids name it) and printed in pytest's header and summary.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from nexus_testing import SERVER_START_TIMEOUT, free_port

MONGODB_URL_ENV = "NEXUS_TEST_MONGODB_URL"


@dataclass(frozen=True, slots=True)
class MongoChoice:
    mode: str  # the test id: mongodb-real, mongodb-secantus or mongodb-unavailable
    url: str | None  # None: no server could be had (`why` says why; the tests fail)
    why: str  # one line for the pytest header


def _secantusd() -> str | None:
    beside = Path(sys.executable).parent / "secantusd-py"
    return str(beside) if beside.exists() else shutil.which("secantusd-py")


def _start_secantus(binary: str) -> str:
    """Start secantusd-py on a free port; its URL once it answers a ping (or RuntimeError)."""
    from pymongo import MongoClient
    from pymongo.errors import PyMongoError

    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="nexus-secantus-")) / "secantusd.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "--storage-path", ":memory:", "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    atexit.register(_stop, proc)
    url = f"mongodb://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"secantusd-py exited {proc.returncode}: {log.read_text()[-500:]}")
        client: MongoClient[dict[str, object]] = MongoClient(url, serverSelectionTimeoutMS=200)
        try:
            client.admin.command("ping")
            return url
        except PyMongoError:  # not accepting yet; the deadline decides
            time.sleep(0.05)
        finally:
            client.close()
    _stop(proc)
    raise RuntimeError(f"secantusd-py not ready on {port} within {SERVER_START_TIMEOUT}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
            return
        proc.kill()
        proc.wait(timeout=5)


@cache
def mongo_choice() -> MongoChoice:
    url = os.environ.get(MONGODB_URL_ENV)
    if url:
        return MongoChoice("mongodb-real", url, f"a real server ({MONGODB_URL_ENV})")
    binary = _secantusd()
    reason = "secantusd-py not installed (the secantusdb dev dependency)"
    if binary is not None:
        try:
            url = _start_secantus(binary)
            return MongoChoice("mongodb-secantus", url, f"SecantusDB (secantusd-py at {url})")
        except (OSError, RuntimeError) as exc:
            reason = f"secantusd-py did not start: {exc}"
    return MongoChoice(
        "mongodb-unavailable",
        None,
        f"no server: {reason} (install the dev dependencies, or set {MONGODB_URL_ENV}=mongodb://...)",
    )
