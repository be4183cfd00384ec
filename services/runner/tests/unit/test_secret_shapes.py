"""Secrets leave in no shape: rot13, decimal codes, hex with separators, gzip/zlib in base64
are redacted and refused; a value sent in pieces over two calls is refused; memory and
delegation inputs pass the same scanner whatever the registry's own exemptions say."""

from __future__ import annotations

import base64
import codecs
import gzip
import json
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from nats.aio.client import Client
from nexus_events.events.specs import Permissions, ToolGrant

from nexus_runner.git import Author, Git
from nexus_runner.safety import REDACTED, SECRET_REFUSAL, SecretRegistry
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.tools.args import DelegateArgs
from nexus_runner.tools.contained import ContainedRegistry
from nexus_runner.tools.memory import RunMemory, RunScopes
from nexus_runner.workspace import Workspace

SECRET = "hT9-wq2Lz-0pXv7-kRm4"
RAW = SECRET.encode()

SHAPES: dict[str, Callable[[bytes], str]] = {
    "rot13": lambda b: codecs.encode(b.decode(), "rot13"),
    "decimal, commas": lambda b: ",".join(str(c) for c in b),
    "decimal, spaces": lambda b: " ".join(str(c) for c in b),
    "decimal, semicolons": lambda b: "; ".join(str(c) for c in b),
    "decimal array": lambda b: str(list(b)),
    "html entities": lambda b: "".join(f"&#{c};" for c in b),
    "hex, colons": lambda b: ":".join(f"{c:02x}" for c in b),
    "hex, spaces": lambda b: " ".join(f"{c:02X}" for c in b),
    "hex, backslash-x": lambda b: "".join(f"\\x{c:02x}" for c in b),
    "hex, 0x list": lambda b: ", ".join(f"0x{c:02x}" for c in b),
    "hex, percent": lambda b: "".join(f"%{c:02X}" for c in b),
    "gzip in base64": lambda b: base64.b64encode(gzip.compress(b"KEY=" + b)).decode(),
    "zlib in base64": lambda b: base64.b64encode(zlib.compress(b)).decode(),
    "gzip in url-safe base64": lambda b: base64.urlsafe_b64encode(gzip.compress(b)).decode(),
    "reversed, in hex with colons": lambda b: ":".join(f"{c:02x}" for c in b[::-1]),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_each_encoding_is_found_and_redacted(shape: str) -> None:
    encoded = SHAPES[shape](RAW)
    secrets = SecretRegistry([SECRET])
    text = f"sending {encoded} (end)"
    assert secrets.contains(text)
    clean = secrets.redact_values(text)
    assert encoded not in clean
    assert REDACTED in clean
    assert clean.startswith("sending ")
    assert clean.endswith("(end)")
    # Inside a call's JSON arguments (backslashes doubled) too.
    assert secrets.contains(json.dumps({"command": f"printf '{encoded}'"}))


@pytest.mark.parametrize(
    "text",
    [
        "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; done",
        "sha 3f786850e387550fdab836ed7e6dc881de23001b and 0x00 0x01 0x02",
        "mac 00:1a:2b:3c:4d:5e:6f:70 at 10.0.0.1, 2026-11-27 23:59:59",
        base64.b64encode(gzip.compress(b"just some ordinary text", mtime=0)).decode(),
        "H4sIAAAAAAAAA-not-really-gzip eJxlongbutgarbagehere",
        "password is not a value; /usr/local/bin:/usr/bin",
    ],
)
def test_ordinary_encoded_looking_text_is_left_alone(text: str) -> None:
    secrets = SecretRegistry([SECRET])
    assert not secrets.holds_piece(text)
    assert secrets.redact_values(text) == text


def test_a_zip_bomb_costs_bounded_work() -> None:
    bomb = base64.b64encode(gzip.compress(b"\0" * 50_000_000 + RAW)).decode()
    secrets = SecretRegistry([SECRET])
    # The value sits past what is inflated: not found, but the call returns (bounded).
    assert not secrets.contains(bomb)


@pytest.mark.parametrize("cut", [8, 10, 12])
def test_pieces_of_a_value_count_as_the_value_in_arguments(cut: int) -> None:
    secrets = SecretRegistry([SECRET])
    first, second = SECRET[:cut], SECRET[cut:]
    assert secrets.holds_piece(f"echo {first} >> /tmp/x")
    assert secrets.holds_piece(f"echo {second} >> /tmp/x")
    # Pieces are refused, not redacted: records keep ordinary text that happens to share one.
    assert secrets.redact_values(first) == first


def test_pieces_of_words_paths_and_lines_are_not_tracked() -> None:
    secrets = SecretRegistry(["password-password", "/usr/local/lib/python3", "a line of text 2"])
    for text in ("password", "cd /usr/local/lib", "a line of", "python3"):
        assert not secrets.holds_piece(text), text


def test_only_the_secret_segment_of_a_url_value_gives_pieces() -> None:
    secrets = SecretRegistry(["postgres://app:S3cr3tPw99@localhost:5432/app"])
    assert not secrets.holds_piece("psql -h localhost:5432/app -U app")
    assert secrets.holds_piece("echo S3cr3tPw")
    assert secrets.holds_piece("echo cr3tPw99")


def contained(tmp_path: Path, tools: list[str]) -> ToolRegistry:
    ws = Workspace(tmp_path)
    secrets = SecretRegistry([SECRET])
    ctx = ToolContext(
        workspace=ws,
        git=Git(ws.root, Author("a", "a@x"), secrets),
        shell_timeout=10,
        output_cap=10_000,
        secrets=secrets,
    )
    return ContainedRegistry([ToolGrant(name=t) for t in tools], Permissions(), ctx)


async def test_halves_in_two_calls_are_refused(tmp_path: Path) -> None:
    reg = contained(tmp_path, ["run_shell"])
    out = tmp_path / "out.txt"
    for half in (SECRET[:10], SECRET[10:]):
        call = {"command": f"printf %s {half} >> {out}"}
        outcome = await reg.execute(reg.decide("run_shell", json.dumps(call)))
        assert not outcome.ok
        assert outcome.output == SECRET_REFUSAL
    assert not out.exists()


def plain(tmp_path: Path, sent: list[DelegateArgs]) -> ToolRegistry:
    """A registry with no containment of its own: the tools must refuse by themselves."""
    ws = Workspace(tmp_path)

    async def delegate(args: DelegateArgs) -> str:
        sent.append(args)
        return "child done"

    ctx = ToolContext(
        workspace=ws,
        git=Git(ws.root, Author("a", "a@x")),
        shell_timeout=10,
        output_cap=1000,
        secrets=SecretRegistry([SECRET]),
        # Never connected: a call that got past the scanner would say memory is unavailable.
        memory=RunMemory(Client(), "run-1", RunScopes(agent_id="implementer"), timeout=1),
        delegate=delegate,
    )
    return ToolRegistry([ToolGrant(name=t) for t in ("remember", "delegate")], Permissions(), ctx)


@pytest.mark.parametrize("shape", ["rot13", "decimal, commas", "gzip in base64"])
async def test_remember_and_delegate_refuse_an_encoded_secret(tmp_path: Path, shape: str) -> None:
    sent: list[DelegateArgs] = []
    reg = plain(tmp_path, sent)
    encoded = SHAPES[shape](RAW)
    remembered = await reg.execute(
        reg.decide("remember", json.dumps({"text": f"the key is {encoded}"}), "c1")
    )
    assert not remembered.ok
    assert SECRET_REFUSAL in remembered.output
    delegated = await reg.execute(
        reg.decide("delegate", json.dumps({"agent": "helper", "input": f"use {encoded}"}))
    )
    assert not delegated.ok
    assert SECRET_REFUSAL in delegated.output
    assert sent == []
    # A piece is enough, and clean inputs still go.
    piece = {"agent": "h", "input": SECRET[:10]}
    half = await reg.execute(reg.decide("delegate", json.dumps(piece)))
    assert not half.ok
    fine = await reg.execute(reg.decide("delegate", json.dumps({"agent": "h", "input": "hello"})))
    assert fine.ok, fine.output
    assert [a.input for a in sent] == ["hello"]
