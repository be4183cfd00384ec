"""The approver policy as a table: who may decide an approval, on which surface, from where."""

from __future__ import annotations

import pytest
from nexus_events.contract.approver_policy import (
    CONSOLE,
    DEFAULT_PRINCIPALS,
    Answer,
    ApproverDefaults,
    ApproverPolicy,
    may_decide,
    parse_principals,
)
from nexus_events.events import ChannelAddress
from nexus_events.events.specs import Permissions
from pydantic import ValidationError

ORIGIN = ChannelAddress(channel="slack", conversation="C1", thread="100.1")
APPROVER_CHATS = frozenset({("slack", "CAPP"), ("telegram", "-1001")})


def chat(user: str, conversation: str, thread: str | None = None, channel: str = "slack") -> Answer:
    return Answer(
        surface=channel,
        who=f"{channel}:{user}",
        chat=ChannelAddress(channel=channel, conversation=conversation, thread=thread),
    )


def policy(
    *principals: str, requester: str = "slack:U1", origin: str = "channel"
) -> ApproverPolicy:
    return ApproverPolicy(
        principals=principals or DEFAULT_PRINCIPALS,
        requester=requester,
        origin_surface=origin,
        origin=ORIGIN if origin == "channel" else None,
        approver_chats=APPROVER_CHATS,
    )


TG_ORIGIN = ChannelAddress(channel="telegram", conversation="7", thread="10")
TG_POLICY = ApproverPolicy(
    principals=DEFAULT_PRINCIPALS,
    run_id="run_a",
    requester="telegram:7",
    origin_surface="channel",
    origin=TG_ORIGIN,
)


def tg(thread: str | None, in_run: str | None = None, user: str = "7") -> Answer:
    where = ChannelAddress(channel="telegram", conversation="7", thread=thread)
    return Answer(surface="telegram", who=f"telegram:{user}", chat=where, in_run=in_run)


PLANE_ADA = Answer(surface="plane", who="human-user", aliases=frozenset({"ada", "ada@x.io"}))
CLI_ALICE = Answer(surface="cli", who="nats:alice", aliases=frozenset({"alice"}))

TABLE = [
    # (case, policy, answer, allowed)
    ("default: anyone paired in an approver chat", policy(), chat("U9", "CAPP", "5.5"), True),
    ("default: the other approver chat", policy(), chat("7", "-1001", channel="telegram"), True),
    ("default: the requester in the origin thread", policy(), chat("U1", "C1", "100.1"), True),
    ("default: the requester in a DM", policy(), chat("U1", "D1"), False),
    ("default: the requester in another run's thread", policy(), chat("U1", "C1", "200.2"), False),
    ("default: someone else in the origin thread", policy(), chat("U2", "C1", "100.1"), False),
    ("default: a paired user's DM", policy(), chat("U2", "D2"), False),
    ("default: the requester at the top of the channel", policy(), chat("U1", "C1"), False),
    ("telegram requester: a reply to the request", TG_POLICY, tg("10"), True),
    ("telegram requester: a reply to the run's ask", TG_POLICY, tg("55", "run_a"), True),
    ("telegram requester: their private chat", TG_POLICY, tg(None), True),
    ("telegram requester: a reply in another run", TG_POLICY, tg("66", "run_b"), False),
    ("telegram: someone else's reply in the run", TG_POLICY, tg("10", user="8"), False),
    ("default: the CLI", policy(), CLI_ALICE, False),
    ("default: Plane", policy(), PLANE_ADA, False),
    ("default: the CLI requester", policy(requester="alice", origin="cli"), CLI_ALICE, True),
    ("default: the Plane requester", policy(requester="ada", origin="plane"), PLANE_ADA, True),
    ("a Plane requester on the CLI", policy(requester="alice", origin="plane"), CLI_ALICE, False),
    ("named chat: in it", policy("chat:slack:CAPP"), chat("U9", "CAPP"), True),
    (
        "named chat: the other approver chat",
        policy("chat:slack:CAPP"),
        chat("7", "-1001", channel="telegram"),
        False,
    ),
    ("named user: in a DM", policy("slack:U1"), chat("U1", "D1"), True),
    ("named user: another user", policy("slack:U1"), chat("U2", "CAPP"), False),
    (
        "named user: same id on another channel",
        policy("slack:U1"),
        chat("U1", "D1", channel="telegram"),
        False,
    ),
    ("any user of a channel", policy("telegram:*"), chat("42", "42", channel="telegram"), True),
    ("plane user by email", policy("plane:user:ada@x.io"), PLANE_ADA, True),
    ("plane user by id", policy("plane:user:human-user"), PLANE_ADA, True),
    ("plane user: someone else", policy("plane:user:bob"), PLANE_ADA, False),
    ("plane role: unknown roles match nobody", policy("plane:role:admin"), PLANE_ADA, False),
    (
        "plane role: a known role",
        policy("plane:role:admin"),
        Answer("plane", "u", roles=frozenset({"admin"})),
        True,
    ),
    ("nats user", policy("nats:alice"), CLI_ALICE, True),
    ("nats user: another", policy("nats:bob"), CLI_ALICE, False),
    ("nats any", policy("nats:*"), CLI_ALICE, True),
    ("nats principal on chat", policy("nats:*"), chat("alice", "D1"), False),
    ("a chat principal on the CLI", policy("slack:*"), CLI_ALICE, False),
]


@pytest.mark.parametrize(("case", "rules", "answer", "allowed"), TABLE, ids=[t[0] for t in TABLE])
def test_may_decide(case: str, rules: ApproverPolicy, answer: Answer, allowed: bool) -> None:
    verdict = may_decide(rules, answer)
    assert verdict.allowed is allowed, verdict.reason
    assert answer.who in verdict.reason


def test_a_refusal_says_who_may_decide() -> None:
    verdict = may_decide(policy(), chat("U2", "D2"))
    assert verdict.reason == (
        "slack:U2 in slack:D2 is not an approver of this run (the default policy allows:"
        " approver-chats (slack:CAPP,telegram:-1001), requester (slack:U1))"
    )
    agent = ApproverPolicy(principals=("nats:ops",), from_agent=True)
    assert "the agent's policy allows: nats:ops" in may_decide(agent, CLI_ALICE).reason


@pytest.mark.parametrize(
    "bad", ["", "nobody", "chat:slack", "plane:group:x", "nats:", "slack:", "chat:slack:C 1"]
)
def test_principals_are_checked_where_an_operator_writes_them(bad: str) -> None:
    with pytest.raises(ValidationError, match="is not an approver"):
        Permissions(approvers=["requester", bad or " "])


def test_principals_parse_in_order_without_repeats() -> None:
    assert parse_principals(" slack:U1, requester,slack:U1 ,") == ("slack:U1", "requester")
    assert Permissions().approvers is None  # the deployment's default applies


def test_the_default_comes_from_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ApproverDefaults().approvers_default == DEFAULT_PRINCIPALS
    monkeypatch.setenv("NEXUS_APPROVERS_DEFAULT", "approver-chats,nats:ops")
    assert ApproverDefaults().approvers_default == ("approver-chats", "nats:ops")
    monkeypatch.setenv("NEXUS_APPROVERS_DEFAULT", "everyone")
    with pytest.raises(ValidationError, match="is not an approver"):
        ApproverDefaults()


def console(name: str, scope: str = "operate") -> Answer:
    return Answer(surface=CONSOLE, who=f"console:{name}", roles=frozenset({scope}))


@pytest.mark.parametrize(
    ("principals", "answer", "allowed"),
    [
        (("console:ann",), console("ann"), True),
        (("console:ann",), console("bob"), False),
        (("console:*",), console("bob"), True),
        (("console:*",), console("bob", scope="read"), False),
        (("console:ann",), console("ann", scope="read"), False),
        # A console user is never the run's requester, even under the same name.
        (("requester",), console("ann"), False),
        # A console principal is not a chat user: a Slack answer never matches it.
        (("console:*",), Answer(surface="slack", who="slack:ann"), False),
        (("nats:*",), console("ann"), False),
    ],
)
def test_console_principals(principals: tuple[str, ...], answer: Answer, allowed: bool) -> None:
    rules = ApproverPolicy(principals=parse_principals(principals), requester="console:ann")
    assert may_decide(rules, answer).allowed is allowed
