"""What the honeytoken attack plants and where a leak would show: the secrets, the origin
repository (with the attack kit in it), a bystander repository, the outside places, the
scripted model and a local "attacker" listener, each served from a thread of the test."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.server
import json
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.openai_server import FakeOpenAI, Reply

KIT = Path(__file__).resolve().parent
SUFFIX = uuid.uuid4().hex[:6]

# The honeytokens, each unique enough that either half alone is evidence.
H_LLM = "hnyLLMkeyQ7w2e9R4t6Y8u0iZp"  # the runner's model API key (its environment)
H_DEPLOY = "hnyDEPLOYZx8c6v4b2n0mLk5Jq"  # in the environment that starts the stack
H_ENVFILE = "hnyENVFILEk3j5h7g9f1d2s4Aq"  # AWS_SECRET_ACCESS_KEY in the repository's .env
H_AKIA = "AKIAHNYENVFILE7Q4W9X"  # AWS_ACCESS_KEY_ID in the same .env
H_VARTMP = "hnyVARTMPp0o9i8u7y6t5r4Ew"  # a file under /var/tmp
H_HOME = "hnyHOMEb3NzaC1yc2EAAAADaQb"  # ~/.ssh/id_rsa of the operator (the stack's HOME)
H_VICTIM = "hnyVICTIMpw5N4b3V2c1X0zQr"  # the password in the other run's task input
HONEYTOKENS = {
    "model API key": H_LLM,
    "stack env token": H_DEPLOY,
    ".env secret": H_ENVFILE,
    ".env key id": H_AKIA,
    "/var/tmp file": H_VARTMP,
    "operator home": H_HOME,
    "other run's input": H_VICTIM,
}

ATTACKER_RUN = f"honey-attacker-{SUFFIX}"
VICTIM_RUN = f"honey-victim-{SUFFIX}"
RACER_RUN = f"honey-racer-{SUFFIX}"
FORGED_RUN = f"honey-forged-{SUFFIX}"

MAKEFILE = """\
test:
\t@test ! -s make-plan.txt || python3 probes.py $$(cat make-plan.txt)
\tpython3 -m pytest -q -p no:cacheprovider test_ok.py
"""
CONFTEST = """\
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
PLAN = HERE / "conftest-plan.txt"
NAMES = PLAN.read_text().split() if PLAN.exists() else []
# At import, as a planted conftest.py runs: whatever run_tests' command is.
PROBES = [sys.executable, str(HERE / "probes.py"), *NAMES]
OUT = subprocess.run(PROBES, capture_output=True, text=True, check=False).stdout if NAMES else ""


def pytest_terminal_summary(terminalreporter):
    for line in OUT.splitlines():
        terminalreporter.write_line(line)
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=op", "-c", "user.email=op@nexus.local", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@dataclass
class Listener:
    """A local HTTP server standing for the attacker's host; records every request."""

    hits: list[str] = field(default_factory=list)
    url: str = ""

    @contextlib.contextmanager
    def serving(self) -> Iterator[Listener]:
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def _hit(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                hits.append(f"{self.command} {self.path} {self.rfile.read(size)!r}")
                self.send_response(200)
                self.end_headers()

            do_GET = do_POST = do_PUT = _hit  # noqa: N815 - http.server's names

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()


@contextlib.contextmanager
def model_server(reply: Callable[[dict[str, Any]], Reply]) -> Iterator[FakeOpenAI]:
    """The scripted model, served from a thread's event loop while the stack runs."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    fake = FakeOpenAI(default=reply)
    asyncio.run_coroutine_threadsafe(fake.start(), loop).result(30)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@dataclass
class World:
    root: Path
    home: Path
    vartmp: Path
    origin: Path
    bystander: Path

    @classmethod
    def make_home(cls, root: Path) -> Path:
        home = root / "operator-home"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "id_rsa").write_text(
            f"-----BEGIN OPENSSH PRIVATE KEY-----\n{H_HOME}\n-----END OPENSSH PRIVATE KEY-----\n"
        )
        (home / ".bashrc").write_text("# the operator's\n")
        return home

    @classmethod
    def plant(cls, root: Path, home: Path, targets: dict[str, str]) -> World:
        vartmp = Path(f"/var/tmp/nexus-honey-{SUFFIX}")
        vartmp.mkdir(exist_ok=True)
        (vartmp / "secret.txt").write_text(f"vault={H_VARTMP}\n")
        world = cls(root, home, vartmp, root / "origin", root / "bystander")
        origin = world.origin
        origin.mkdir()
        git(origin, "init", "-q", "-b", "main")
        (origin / "README.md").write_text("# demo project\n")
        (origin / ".env").write_text(
            f"AWS_ACCESS_KEY_ID={H_AKIA}\nAWS_SECRET_ACCESS_KEY={H_ENVFILE}\nREGION=eu-west-1\n"
        )
        (origin / "Makefile").write_text(MAKEFILE)
        (origin / "conftest.py").write_text(CONFTEST)
        (origin / "deploy.sh").write_text("#!/bin/sh\necho deploy\n")
        (origin / "test_ok.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
        shutil.copy(KIT / "probes.py", origin / "probes.py")
        (origin / "targets.json").write_text(
            json.dumps({**targets, "home": str(home), "vartmp": str(vartmp),
                        "origin": str(origin), "bystander": str(world.bystander)}, indent=1)
        )  # fmt: skip
        (origin / "src").mkdir()
        (origin / "src" / "app.py").write_text("print('hello')\n")
        git(origin, "add", "-A")
        git(origin, "commit", "-q", "-m", "demo")
        world.bystander.mkdir()
        git(world.bystander, "init", "-q", "-b", "main")
        (world.bystander / "README.md").write_text("never given to any run\n")
        git(world.bystander, "add", "-A")
        git(world.bystander, "commit", "-q", "-m", "bystander")
        return world

    def cleanup(self) -> None:
        shutil.rmtree(self.vartmp, ignore_errors=True)
        for stray in Path("/var/tmp").glob("pwned-by-*"):
            with contextlib.suppress(OSError):
                stray.unlink()


def files(*dirs: Path) -> dict[str, str]:
    """Every file under `dirs` (symlinks not followed) with a digest of its content."""
    out = {}
    for d in dirs:
        for p in sorted(d.rglob("*")):
            if p.is_file() and not p.is_symlink():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def outside_snapshot(world: World, stack_home: Path) -> dict[str, str]:
    """What must not change: the operator's home, the /var/tmp vault, stray files in /var/tmp
    and the stack home's top level, the bystander's files, the origin's config, hooks and
    work tree (its objects and refs are checked apart)."""
    snap = files(world.home, world.vartmp, world.bystander)
    snap.update(files(world.origin / ".git" / "hooks"))
    snap.update({str(p): "" for p in Path("/var/tmp").glob("pwned-by-*")})
    snap.update({str(p): "" for p in stack_home.glob("pwned-by-*")})
    origin_tree = [p for p in world.origin.iterdir() if p.name != ".git"]
    snap.update(files(*[p for p in origin_tree if p.is_dir()]))
    snap.update(
        {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in origin_tree if p.is_file()}
    )
    config = world.origin / ".git" / "config"
    snap[str(config)] = hashlib.sha256(config.read_bytes()).hexdigest()
    return snap


def refs(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines())


def objects(repo: Path) -> set[str]:
    out = git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    return set(out.split())


def object_texts(repo: Path, ids: set[str]) -> dict[str, tuple[str, str]]:
    """Each object of `ids`: (its path or kind, its content as text)."""
    names: dict[str, str] = {}
    for line in git(repo, "--no-replace-objects", "rev-list", "--objects", "--all").splitlines():
        oid, _, path = line.partition(" ")
        names[oid] = path
    out = {}
    for oid in ids:
        kind = git(repo, "--no-replace-objects", "cat-file", "-t", oid).strip()
        raw = subprocess.run(
            ["git", "-C", str(repo), "--no-replace-objects", "cat-file", kind, oid],
            capture_output=True,
            check=True,
        ).stdout
        out[oid] = (f"{kind} {names.get(oid, '')}".strip(), raw.decode("latin-1"))
    return out
