"""Printing results: rich tables for people, one JSON document for machines."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from nexus_cli.options import Output

console = Console(highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """One JSON document on stdout (no colour, no wrapping)."""
    print(json.dumps(data, indent=2, default=str))


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", box=None, pad_edge=False)
    for i, col in enumerate(columns):
        # The first column is the id people copy: never wrap it.
        t.add_column(col, overflow="fold", no_wrap=i == 0)
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    return t


def emit(
    output: Output,
    data: Any,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
    empty: str = "nothing to show",
) -> None:
    """`data` as JSON, or `rows` as a table (or the `empty` line when there are none)."""
    if output is Output.JSON:
        print_json(data)
        return
    rows = list(rows)
    if not rows:
        console.print(f"[dim]{empty}[/]")
        return
    console.print(table(title, columns, rows))


def message(output: Output, text: str, data: Any) -> None:
    """A one-line confirmation for people, or `data` as JSON."""
    if output is Output.JSON:
        print_json(data)
    else:
        console.print(text, markup=False)


def _aware(iso: str | None) -> datetime | str:
    """An ISO time as an aware datetime (naive = UTC); otherwise what to show instead: "" for
    None, the text itself when it does not parse."""
    if not iso:
        return ""
    try:
        then = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    return then if then.tzinfo is not None else then.replace(tzinfo=UTC)


def ago(iso: str | None, now: datetime | None = None) -> str:
    """``3s ago`` / ``5m ago`` / ``2h ago`` for an ISO time; empty for None."""
    then = _aware(iso)
    if not isinstance(then, datetime):
        return then
    seconds = max(((now or datetime.now(UTC)) - then).total_seconds(), 0)
    return f"{duration(seconds)} ago"


def until(iso: str | None, now: datetime | None = None) -> str:
    """``14:05 (in 3m00s)`` for a coming ISO time, in local time (with the date when it is
    not today); empty for None."""
    then = _aware(iso)
    if not isinstance(then, datetime):
        return then
    current = now or datetime.now(UTC)
    local, today = then.astimezone(), current.astimezone().date()
    shown = local.strftime("%H:%M") if local.date() == today else local.strftime("%Y-%m-%d %H:%M")
    seconds = (then - current).total_seconds()
    return f"{shown} (in {duration(seconds)})" if seconds > 0 else f"{shown} (due)"


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{(seconds % 3600) // 60:02.0f}m"
