"""`nexus dlq ls|show|replay`: dead letters on NEXUS_DLQ, and putting them back."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from nexus_events.events import DeadLetter
from nexus_events.transport.dead_letter_replay import (
    LetterError,
    StoredLetter,
    list_letters,
    read_letter,
    replay_letter,
)

from nexus_cli.client import Session
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import console, emit, message, print_json
from nexus_cli.target import resolve_target

app = typer.Typer(help="Dead letters: list, show, replay onto their original subject.")
SeqArg = Annotated[int, typer.Argument(metavar="SEQ", min=1, help="NEXUS_DLQ stream sequence.")]


def _view(stored: StoredLetter) -> dict[str, Any]:
    at = stored.at.isoformat() if stored.at else None
    return {"seq": stored.seq, "time": at, **stored.letter.model_dump(mode="json")}


def _cli_error(exc: LetterError) -> CliError:
    hint = "`nexus dlq ls`" if str(exc).startswith("no dead letter") else None
    code = ExitCode.NOT_FOUND if exc.missing else ExitCode.INVALID
    return CliError(str(exc), hint=hint, code=code)


async def _get(s: Session, seq: int) -> tuple[DeadLetter, str | None]:
    try:
        return await read_letter(s.bus, seq), None
    except LetterError as exc:
        raise _cli_error(exc) from None


async def dead_letters(s: Session, service: str | None) -> list[dict[str, Any]]:
    """Dead letters on NEXUS_DLQ (of one service, or all), oldest first."""
    return [_view(stored) for stored in await list_letters(s.bus, service)]


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
            try:
                letter, ack = await s.publish_guarded(replay_letter(s.bus, seq, g.timeout))
            except LetterError as exc:
                raise _cli_error(exc) from None
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
