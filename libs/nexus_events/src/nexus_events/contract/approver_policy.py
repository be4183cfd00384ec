"""Who may decide an approval: the approver policy and `may_decide`, pure (no I/O).

A policy is a list of principals, from the agent definition (``permissions.approvers``) or,
when the agent names none, from the deployment's default (``NEXUS_APPROVERS_DEFAULT``; unset:
`DEFAULT_PRINCIPALS`, the approver chats and the run's requester). Principals:

==============================  ============================================================
``approver-chats``              anyone paired, speaking in a configured approver chat
                                (``NEXUS_CHANNEL_APPROVERS`` of the gateway)
``requester``                   the person who asked for the run, where they asked: in the
                                run's origin chat thread, on its Plane work item, or on the
                                CLI (the run's ``requested_by`` is the CLI identity's user)
``chat:<channel>:<chat>``       anyone paired, speaking in that chat (``chat:slack:C0123``)
``<channel>:<user>``            that chat user anywhere, a DM included (``slack:U1``,
                                ``telegram:42``); ``<channel>:*`` any paired user of it
``plane:user:<id|email|name>``  that Plane user (comment ``/approve``)
``plane:role:<role>``           Plane users of that workspace role, ``admin``, ``member``,
                                ``guest`` or Plane's number (plane-sync asks Plane; a role it
                                cannot learn is none: the principal fails closed)
``nats:<user>``, ``nats:*``     that NATS user on the CLI (advisory: docs/approvals.md)
``console:<name>``              that console user (its token's name); ``console:*`` any
                                console user; both need the token's ``operate`` scope
                                (``requester`` never covers a console user: no run is
                                requested from the console)
``team:<name>``                 any member of that team: the deployment names each team's
                                members as principals of the kinds above (``NEXUS_TEAMS``,
                                docs/spend.md), e.g. ``{"alpha": ["slack:U1", "nats:ann"]}``
==============================  ============================================================

Every surface (chat, Plane, CLI) builds an `Answer` for the person answering and asks
`may_decide` before it claims the approval; a refusal changes nothing and is audited.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

if TYPE_CHECKING:  # the event models validate principals with this module: no import cycle
    from nexus_events.events.channels import ChannelAddress

REQUESTER = "requester"
APPROVER_CHATS = "approver-chats"
# Safe by default: people the deployment made approvers, and the person who asked for the run.
DEFAULT_PRINCIPALS: tuple[str, ...] = (APPROVER_CHATS, REQUESTER)

# The surfaces that are not chat channels; any other surface name is a chat channel.
PLANE = "plane"
CLI = "cli"
CONSOLE = "console"
# The console scope an answer needs (in `Answer.roles`) to decide anything.
CONSOLE_OPERATE = "operate"

_PART = r"[^\s:*]+"
_CHAT_USER = re.compile(rf"^(?P<channel>[A-Za-z0-9_-]+):(?P<user>{_PART}|\*)$")
_CHAT = re.compile(rf"^chat:(?P<channel>[A-Za-z0-9_-]+):(?P<chat>{_PART})$")
_PLANE = re.compile(r"^plane:(?P<kind>user|role):(?P<name>\S+)$")
_NATS = re.compile(rf"^nats:(?P<user>{_PART}|\*)$")
_CONSOLE = re.compile(rf"^console:(?P<user>{_PART}|\*)$")
_TEAM = re.compile(r"^team:(?P<team>[A-Za-z0-9_-]{1,128})$")


def parse_principal(text: str) -> str:
    """The principal, stripped; `ValueError` saying the grammar if it is not one."""
    p = text.strip()
    if p in (REQUESTER, APPROVER_CHATS):
        return p
    for pattern in (_CHAT, _PLANE, _NATS, _CONSOLE, _TEAM):
        if pattern.fullmatch(p):
            return p
    match = _CHAT_USER.fullmatch(p)
    if match and match["channel"] not in ("chat", PLANE, "nats", CLI, CONSOLE, "team"):
        return p
    raise ValueError(
        f"{text!r} is not an approver (requester, approver-chats, chat:<channel>:<chat>,"
        " <channel>:<user>, plane:user:<who>, plane:role:<role>, nats:<user>,"
        " console:<name>, team:<name>)"
    )


def parse_member(text: str) -> str:
    """A team member: a principal naming people (not requester, approver-chats or a team,
    which mean nothing without a run or would nest teams); `ValueError` otherwise."""
    p = parse_principal(text)
    if p in (REQUESTER, APPROVER_CHATS) or _TEAM.fullmatch(p):
        raise ValueError(f"{text!r} cannot be a team member (name people: slack:U1, nats:ann)")
    return p


Teams = Mapping[str, tuple[str, ...]]


def parse_teams(value: object) -> dict[str, tuple[str, ...]]:
    """``NEXUS_TEAMS`` -> {team: members}: a JSON object of team name to a list of principals
    (or the same already decoded); `ValueError` naming what is wrong."""
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"NEXUS_TEAMS is not JSON: {exc.msg}") from None
    if not isinstance(value, Mapping):
        # ValueError, not TypeError: pydantic reports only the former as a field error.
        raise ValueError('teams: a JSON object like {"alpha": ["slack:U1", "nats:ann"]}')  # noqa: TRY004
    teams: dict[str, tuple[str, ...]] = {}
    for name, members in value.items():
        if not isinstance(name, str) or not _TEAM.fullmatch(f"team:{name}"):
            raise ValueError(f"team name {name!r}: must match [A-Za-z0-9_-]{{1,128}}")
        if not isinstance(members, list | tuple):
            raise ValueError(f"team {name}: members are a list of principals")  # noqa: TRY004
        teams[name] = tuple(dict.fromkeys(parse_member(str(m)) for m in members))
    return teams


def parse_principals(value: str | Iterable[str]) -> tuple[str, ...]:
    """A comma-separated string or a list -> validated principals, in order, no repeats."""
    # A trailing comma in a variable is harmless; a blank entry in a YAML list is a mistake.
    items = [i for i in value.split(",") if i.strip()] if isinstance(value, str) else list(value)
    return tuple(dict.fromkeys(parse_principal(i) for i in items))


def parse_default(value: object) -> object:
    """A settings value of ``NEXUS_APPROVERS_DEFAULT`` -> principals (blank: the default)."""
    if isinstance(value, str | list | tuple):
        return parse_principals(value) or DEFAULT_PRINCIPALS
    return value


class ApproverDefaultFields(BaseModel):
    """The deployment's default policy, one variable every surface reads alike: a field group
    the gateway's and plane-sync's settings add to theirs, so a bad value stops them at
    start-up."""

    approvers_default: Annotated[tuple[str, ...], NoDecode] = Field(
        DEFAULT_PRINCIPALS,
        description="Who decides approvals of agents that name no `approvers`"
        " (docs/approvals.md): comma-separated principals; every surface reads this variable.",
    )

    teams: Annotated[dict[str, tuple[str, ...]], NoDecode] = Field(
        default_factory=dict,
        description="Teams and their members, for the principal team:<name> (docs/spend.md):"
        ' a JSON object, e.g. {"alpha": ["slack:U1", "nats:ann", "console:carol"]}; every'
        " surface reads this variable.",
    )

    @field_validator("approvers_default", mode="before")
    @classmethod
    def _parse(cls, value: object) -> object:
        return parse_default(value)

    @field_validator("teams", mode="before")
    @classmethod
    def _parse_teams(cls, value: object) -> object:
        return parse_teams(value)


class ApproverDefaults(ApproverDefaultFields, BaseSettings):
    """`ApproverDefaultFields` read on their own (the CLI's ``nexus approvals``)."""

    model_config = SettingsConfigDict(env_prefix="NEXUS_", extra="ignore")


@dataclass(frozen=True, slots=True)
class Answer:
    """Who answers, on which surface, and from where.

    `who` is the answer's principal form: ``slack:U1`` (chat), ``nats:alice`` (CLI), or the
    Plane actor's id; `aliases` are further names of the same person (a Plane email and
    display name); `chat` says where a chat answer was written (`thread` None: at the top
    level, not in a thread); `in_run` is the run whose thread it replies in, if the gateway
    knows one (the run's request or any message the gateway posted for it).
    """

    surface: str
    who: str
    aliases: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    chat: ChannelAddress | None = None
    in_run: str | None = None


@dataclass(frozen=True, slots=True)
class ApproverPolicy:
    """The principals of one approval, with what `requester` and `approver-chats` mean for
    its run: who asked (`requester`, as its ``requested_by``), from where (`origin`: the chat
    thread of a chat-started run; `origin_surface`: cli, plane, channel ...)."""

    principals: tuple[str, ...]
    run_id: str | None = None
    requester: str | None = None
    origin_surface: str | None = None
    origin: ChannelAddress | None = None
    approver_chats: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    from_agent: bool = False
    teams: Teams = field(default_factory=dict)

    def describe(self) -> str:
        """The principals, `requester` spelt out: what `nexus approvals ls` shows."""
        out = []
        for p in self.principals:
            if p == REQUESTER and self.requester:
                out.append(f"requester ({self.requester})")
            elif p == APPROVER_CHATS and self.approver_chats:
                chats = ",".join(f"{c}:{v}" for c, v in sorted(self.approver_chats))
                out.append(f"approver-chats ({chats})")
            elif (m := _TEAM.fullmatch(p)) is not None:
                members = ",".join(self.teams.get(m["team"], ())) or "no members configured"
                out.append(f"{p} ({members})")
            else:
                out.append(p)
        return ", ".join(out)


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    reason: str


def _names(answer: Answer) -> frozenset[str]:
    return frozenset({answer.who, *answer.aliases})


def _is_requester(policy: ApproverPolicy, answer: Answer) -> bool:
    if not policy.requester or policy.requester not in _names(answer):
        return False
    if answer.surface == CLI:
        return policy.origin_surface == CLI
    if answer.surface == PLANE:
        return policy.origin_surface == PLANE
    return _in_origin_thread(policy, answer)


def _in_origin_thread(policy: ApproverPolicy, answer: Answer) -> bool:
    """A chat requester counts in the run's own thread, nowhere else: the thread it was asked
    from, a reply to one of its messages (Telegram threads by replies), or the top level of
    their one-to-one chat with the bot (a Telegram private chat's id is the user's id)."""
    chat, origin = answer.chat, policy.origin
    if chat is None or origin is None:
        return False
    if (chat.channel, chat.conversation) != (origin.channel, origin.conversation):
        return False
    if chat.thread is None:
        return answer.who == f"{chat.channel}:{chat.conversation}"
    return chat.thread == origin.thread or (
        answer.in_run is not None and answer.in_run == policy.run_id
    )


def _matches(principal: str, policy: ApproverPolicy, answer: Answer) -> bool:  # noqa: PLR0911
    if m := _TEAM.fullmatch(principal):
        # Members are people principals (parse_member): no team nests another.
        return any(_matches(p, policy, answer) for p in policy.teams.get(m["team"], ()))
    if principal == REQUESTER:
        return _is_requester(policy, answer)
    chat = answer.chat
    if principal == APPROVER_CHATS:
        return chat is not None and (chat.channel, chat.conversation) in policy.approver_chats
    if m := _CHAT.fullmatch(principal):
        return chat is not None and (chat.channel, chat.conversation) == (m["channel"], m["chat"])
    if m := _PLANE.fullmatch(principal):
        if answer.surface != PLANE:
            return False
        names = answer.roles if m["kind"] == "role" else _names(answer)
        return m["name"] in names
    if m := _NATS.fullmatch(principal):
        return answer.surface == CLI and (m["user"] == "*" or f"nats:{m['user']}" == answer.who)
    if m := _CONSOLE.fullmatch(principal):
        if answer.surface != CONSOLE or CONSOLE_OPERATE not in answer.roles:
            return False
        return m["user"] == "*" or principal == answer.who
    if m := _CHAT_USER.fullmatch(principal):
        if chat is None or answer.surface != m["channel"]:
            return False
        return m["user"] == "*" or principal == answer.who
    return False


def may_decide(policy: ApproverPolicy, answer: Answer) -> Verdict:
    """Whether `answer` may decide the approval `policy` guards, and why (the reason is
    what the refused person is told and what the audit event records)."""
    for principal in policy.principals:
        if _matches(principal, policy, answer):
            return Verdict(True, f"{answer.who} may decide as {principal}")
    where = ""
    if answer.chat is not None:
        where = f" in {answer.chat.channel}:{answer.chat.conversation}"
    whose = "the agent's" if policy.from_agent else "the default"
    return Verdict(
        False,
        f"{answer.who}{where} is not an approver of this run"
        f" ({whose} policy allows: {policy.describe() or 'nobody'})",
    )
