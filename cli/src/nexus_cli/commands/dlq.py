"""`nexus dlq ls|show|replay`: dead letters on NEXUS_DLQ, and putting them back."""

from __future__ import annotations

import base64
import hashlib
from typing import Annotated, Any

import nats.js.errors
import typer
from nexus_events.contract import subjects
from nexus_events.contract.streams import DLQ
from nexus_events.errors import DecodeError
from nexus_events.events import DeadLetter
from nexus_events.transport.bus import decode_msg

from nexus_cli.client import Session
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import console, emit, message, print_json
from nexus_cli.target import resolve_target

app = typer.Typer(help="Dead letters: list, show, replay onto their original subject.")
SeqArg = Annotated[int, typer.Argument(metavar="SEQ", min=1, help="NEXUS_DLQ stream sequence.")]
# Headers that belong to the original delivery, not to a replay.
_DROP_HEADERS = frozenset({"Nats-Msg-Id", "Nats-Expected-Stream", "Nats-Expected-Last-Sequence"})


def _view(seq: int, letter: DeadLetter, at: str | None) -> dict[str, Any]:
    return {"seq": seq, "time": at, **letter.model_dump(mode="json")}


async def _get(s: Session, seq: int) -> tuple[DeadLetter, str | None]:
    try:
        raw = await s.bus.js.get_msg(DLQ, seq)
    except nats.js.errors.NotFoundError:
        raise CliError(
            f"no dead letter {seq}", hint="`nexus dlq ls`", code=ExitCode.NOT_FOUND
        ) from None
    try:
        decoded = DeadLetter.model_validate_json(raw.data or b"{}")
    except ValueError:
        raise CliError(
            f"message {seq} of {DLQ} is not a dead letter", code=ExitCode.INVALID
        ) from None
    return decoded, None


async def _original(s: Session, seq: int, letter: DeadLetter) -> tuple[bytes, dict[str, str]]:
    """The original body and headers: from the letter, or, when the letter kept only part of
    them, from the original's stream (checked against the letter's digest)."""
    if not letter.body_truncated and not letter.headers_truncated:
        body = (
            base64.b64decode(letter.body)
            if letter.body_encoding == "base64"
            else letter.body.encode()
        )
        return body, dict(letter.headers)
    if not letter.stream or not letter.stream_seq:
        raise CliError(
            f"dead letter {seq} holds a truncated copy and no position of the original",
            code=ExitCode.INVALID,
        )
    try:
        raw = await s.bus.js.get_msg(letter.stream, letter.stream_seq)
    except nats.js.errors.NotFoundError:
        raise CliError(
            f"dead letter {seq} holds a truncated copy and the original is gone from "
            f"{letter.stream} (seq {letter.stream_seq}): nothing whole to replay",
            code=ExitCode.NOT_FOUND,
        ) from None
    data = raw.data or b""
    if letter.body_sha256 and hashlib.sha256(data).hexdigest() != letter.body_sha256:
        raise CliError(
            f"{letter.stream} seq {letter.stream_seq} is not the original of dead letter {seq}"
            " (digest differs)",
            code=ExitCode.INVALID,
        )
    return data, dict(raw.headers or {})


async def dead_letters(s: Session, service: str | None) -> list[dict[str, Any]]:
    """Dead letters on NEXUS_DLQ (of one service, or all), oldest first."""
    letters = []
    subject = (
        subjects.dead_letter(service) if service else subjects.family_filter(subjects.Family.DLQ)
    )
    async for msg in s.bus.replay_raw(DLQ, filter_subject=subject):
        try:
            d = decode_msg(msg)
        except DecodeError:
            continue
        if isinstance(d.event, DeadLetter):
            at = d.envelope.timestamp.isoformat() if d.envelope.timestamp else None
            letters.append(_view(d.envelope.stream_seq or 0, d.event, at))
    return letters


@app.command("ls")
def ls_cmd(
    ctx: typer.Context,
    service: Annotated[str | None, typer.Option(help="Only this service's dead letters.")] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Dead letters, oldest first."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            letters = await dead_letters(s, service)
        emit(
            output,
            {"dead_letters": letters},
            ("SEQ", "SERVICE", "CONSUMER", "ORIGINAL", "SUBJECT", "REASON", "ERROR", "TIME"),
            [
                (
                    x["seq"],
                    x["service"],
                    x["consumer"] or "",
                    f"{x['stream']}:{x['stream_seq']}" if x["stream_seq"] else "",
                    x["subject"],
                    x["reason"],
                    x["error"][:60],
                    x["time"],
                )
                for x in letters
            ],
            empty="no dead letters",
        )

    run(output, body)


@app.command("show")
def show_cmd(ctx: typer.Context, seq: SeqArg, output: OutputOpt = Output.TABLE) -> None:
    """One dead letter in full: original subject, headers, body, error."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            letter, _ = await _get(s, seq)
        data = {"seq": seq, **letter.model_dump(mode="json")}
        if output is Output.JSON:
            print_json(data)
            return
        for key in (
            "service",
            "consumer",
            "stream",
            "stream_seq",
            "subject",
            "reason",
            "error",
            "num_delivered",
            "body_size",
            "body_sha256",
        ):
            console.print(f"{key:<14} {data[key]}", markup=False)
        if letter.body_truncated:
            console.print(
                "body truncated: the original is in "
                f"{letter.stream} at {letter.stream_seq} (`nexus dlq replay` reads it there)",
                markup=False,
            )
        console.print("headers", markup=False)
        for k, v in letter.headers.items():
            console.print(f"  {k}: {v}", markup=False)
        console.print(f"body ({letter.body_encoding})", markup=False)
        console.print(letter.body, markup=False)

    run(output, body)


@app.command("replay")
def replay_cmd(ctx: typer.Context, seq: SeqArg, output: OutputOpt = Output.TABLE) -> None:
    """Publish the original message again on its subject (idempotent per dead letter)."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            letter, _ = await _get(s, seq)
            data, original_headers = await _original(s, seq, letter)
            headers = {k: v for k, v in original_headers.items() if k not in _DROP_HEADERS}
            headers["Nats-Msg-Id"] = f"dlq-replay:{seq}"
            try:
                ack = await s.bus.js.publish(
                    letter.subject, data, headers=headers, timeout=g.timeout
                )
            except nats.js.errors.NoStreamResponseError:
                raise CliError(
                    f"no stream stores {letter.subject}", code=ExitCode.INVALID
                ) from None
        message(
            output,
            f"replayed dead letter {seq} onto {letter.subject} ({ack.stream} seq {ack.seq})",
            {
                "seq": seq,
                "subject": letter.subject,
                "stream": ack.stream,
                "stream_seq": ack.seq,
                "duplicate": bool(ack.duplicate),
            },
        )

    run(output, body)
