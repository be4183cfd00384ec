"""`nexus pair ls|approve|revoke`: the chat allowlist (the channel gateway challenges unknown
senders; an operator decides here).

The book is asked of the gateway (``nexus.channels.v1.pairings``), whose tables keep pairings
as long as they hold; when no gateway answers, it is folded from the pairing events
NEXUS_CHANNELS still holds (7 days by default), and a note on stderr says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import CHANNELS
from nexus_events.events import (
    PairingApproved,
    PairingRequested,
    PairingRevoked,
    PairingsReply,
    PairingsRequest,
)
from pydantic import ValidationError
from rich.console import Console

from nexus_cli.client import Session, whoami
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import emit, message
from nexus_cli.target import resolve_target

app = typer.Typer(help="Chat pairing: who may talk to agents from Slack, Telegram, webhooks.")
PAIRING_EVENTS = ("pairing_requested", "pairing_approved", "pairing_revoked")
# Notes for the person beside a result meant for scripts (stdout stays the result).
notes = Console(stderr=True, highlight=False, soft_wrap=True)
# Longest wait for the gateway before falling back to the stream.
GATEWAY_WAIT = 5.0


@dataclass
class Pairing:
    """One sender of one channel, as the events say."""

    channel: str
    user: str
    status: str  # pending | approved | revoked
    code: str | None = None
    expires_at: datetime | None = None
    name: str | None = None
    seq: int = 0  # stream sequence of the last event about it
    order: int = 0  # position in the gateway's answer (0 when folded from the stream)

    def current_status(self, now: datetime) -> str:
        if self.status == "pending" and self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return self.status

    def view(self, now: datetime) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "user": self.user,
            "name": self.name,
            "status": self.current_status(now),
            "code": self.code,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
        }


def fold(events: Iterable[Decoded]) -> dict[tuple[str, str], Pairing]:
    """The allowlist and pending codes after `events` (pairing events, stream order)."""
    book: dict[tuple[str, str], Pairing] = {}
    for d in events:
        channel = d.address.ids.get("channel", "")
        event, seq = d.event, d.envelope.stream_seq or 0
        if isinstance(event, PairingRequested):
            held = book.get((channel, event.user))
            if held is None or held.status != "approved":
                book[channel, event.user] = Pairing(
                    channel,
                    event.user,
                    "pending",
                    event.code,
                    event.expires_at,
                    event.user_name,
                    seq,
                )
        elif isinstance(event, PairingApproved):
            held = book.get((channel, event.user))
            name = held.name if held else None
            book[channel, event.user] = Pairing(
                channel, event.user, "approved", event.code, None, name, seq
            )
        elif isinstance(event, PairingRevoked):
            held = book.get((channel, event.user))
            name = held.name if held else None
            book[channel, event.user] = Pairing(
                channel, event.user, "revoked", None, None, name, seq
            )
    return book


async def _stream_book(s: Session) -> dict[tuple[str, str], Pairing]:
    filters = [subjects.channel_events_filter(event=e) for e in PAIRING_EVENTS]
    decoded: list[Decoded] = []
    for subject in filters:
        decoded += [d async for d in s.bus.replay(CHANNELS, filter_subject=subject)]
    decoded.sort(key=lambda d: d.envelope.stream_seq or 0)
    return fold(decoded)


def from_reply(reply: PairingsReply) -> dict[tuple[str, str], Pairing]:
    """The gateway's answer as the book (its order kept: approvals, then codes)."""
    book: dict[tuple[str, str], Pairing] = {}
    for i, v in enumerate(reply.pairings):
        status = "pending" if v.status == "expired" else v.status  # expiry is recomputed
        # Approved senders first: a code of an approved sender never hides the approval.
        if (v.channel, v.user) not in book:
            book[v.channel, v.user] = Pairing(
                v.channel, v.user, status, v.code, v.expires_at, v.name, v.seq or 0, i
            )
    return book


async def _book(s: Session) -> dict[tuple[str, str], Pairing]:
    """The book from the gateway; from the stream (with a note) when it does not answer."""
    try:
        data = await s.query(
            subjects.CHANNEL_PAIRINGS,
            PairingsRequest(include_expired=True).model_dump(),
            service="channel-gateway",
            wait=min(s.timeout, GATEWAY_WAIT),
        )
        return from_reply(PairingsReply.model_validate(data))
    except CliError as exc:
        if exc.code not in (ExitCode.UNAVAILABLE, ExitCode.TIMEOUT):
            raise
        reason = exc.message
    except ValidationError:
        reason = f"{subjects.CHANNEL_PAIRINGS} answered an unexpected body"
    notes.print(
        f"note: {reason}; using the pairing events NEXUS_CHANNELS still holds"
        " (older pairings are not shown)",
        markup=False,
    )
    return await _stream_book(s)


@app.command("ls")
def ls_cmd(
    ctx: typer.Context,
    all_: Annotated[
        bool,
        typer.Option("--all", help="Also expired codes (and, read from the stream, revoked)."),
    ] = False,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Pending pairing codes and paired senders."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            book = await _book(s)
        now = datetime.now(UTC)
        views = [
            p.view(now)
            for p in sorted(book.values(), key=lambda p: (p.order, p.seq))
            if all_ or p.current_status(now) in ("pending", "approved")
        ]
        emit(
            output,
            {"pairings": views},
            ("CODE", "CHANNEL", "USER", "NAME", "STATUS", "EXPIRES"),
            [
                (
                    v["code"] or "",
                    v["channel"],
                    v["user"],
                    v["name"] or "",
                    v["status"],
                    v["expires_at"] or "",
                )
                for v in views
            ],
            empty="no pairings",
        )

    run(output, body)


@app.command("approve")
def approve_cmd(
    ctx: typer.Context,
    code: Annotated[str, typer.Argument(help="The code the sender was given.")],
    output: OutputOpt = Output.TABLE,
) -> None:
    """Put the sender of a pending pairing code on its channel's allowlist."""
    g = globals_of(ctx)

    async def body() -> None:
        wanted = code.strip().upper()
        async with Session(resolve_target(g), g.timeout) as s:
            book = await _book(s)
            now = datetime.now(UTC)
            match = next((p for p in book.values() if p.code == wanted), None)
            if match is None:
                raise CliError(
                    f"no pairing code {wanted}", hint="`nexus pair ls`", code=ExitCode.NOT_FOUND
                )
            status = match.current_status(now)
            if status != "pending":
                raise CliError(f"pairing code {wanted} is {status}", code=ExitCode.INVALID)
            await s.publish_guarded(
                s.bus.publish(
                    subjects.channel_event(match.channel, "pairing_approved"),
                    PairingApproved(user=match.user, code=wanted, approved_by=whoami()),
                    msg_id=f"pair:approve:{match.channel}:{wanted}",
                )
            )
        message(
            output,
            f"paired {match.channel}:{match.user}",
            {"channel": match.channel, "user": match.user, "code": wanted, "status": "approved"},
        )

    run(output, body)


@app.command("revoke")
def revoke_cmd(
    ctx: typer.Context,
    sender: Annotated[str, typer.Argument(metavar="CHANNEL:USER", help="e.g. slack:U123")],
    output: OutputOpt = Output.TABLE,
) -> None:
    """Take a sender off its channel's allowlist."""
    g = globals_of(ctx)

    async def body() -> None:
        channel, sep, user = sender.partition(":")
        if not sep or not channel or not user:
            raise CliError(
                f"{sender!r}: expected CHANNEL:USER, e.g. slack:U123", code=ExitCode.INVALID
            )
        async with Session(resolve_target(g), g.timeout) as s:
            held = (await _book(s)).get((channel, user))
            if held is None or held.status != "approved":
                raise CliError(
                    f"{channel}:{user} is not paired",
                    hint="`nexus pair ls`",
                    code=ExitCode.NOT_FOUND,
                )
            await s.publish_guarded(
                s.bus.publish(
                    subjects.channel_event(channel, "pairing_revoked"),
                    PairingRevoked(user=user, revoked_by=whoami()),
                    # One revoke per approval: a later re-approval can be revoked again.
                    msg_id=f"pair:revoke:{channel}:{user}:{held.seq}",
                )
            )
        message(
            output,
            f"revoked {channel}:{user}",
            {"channel": channel, "user": user, "status": "revoked"},
        )

    run(output, body)
