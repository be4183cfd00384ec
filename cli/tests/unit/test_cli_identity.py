"""The identity `nexus approve|deny` answers as: the connection's NATS user, else the OS user."""

from __future__ import annotations

import pytest

from nexus_cli.client import whoami
from nexus_cli.commands.approvals import cli_answer, cli_user
from nexus_cli.target import Target


def target(url: str) -> Target:
    return Target("test", url, None, None)


def test_the_nats_user_is_the_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEXUS_NATS_USER", raising=False)
    assert cli_user(target("nats://oncall:pw@nats:4222")) == "oncall"
    assert cli_user(target("nats://a:4222, nats://ops@b:4222")) == "ops"
    monkeypatch.setenv("NEXUS_NATS_USER", "admin")
    assert cli_user(target("nats://oncall@nats:4222")) == "admin"
    answer = cli_answer(target("nats://nats:4222"))
    assert (answer.surface, answer.who, answer.aliases) == ("cli", "nats:admin", {"admin"})


def test_without_a_nats_user_the_os_user_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEXUS_NATS_USER", raising=False)
    assert cli_user(target("nats://127.0.0.1:4222")) == whoami()
