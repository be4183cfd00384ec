"""How the pages word a sleeping run's wake time: ``14:05 UTC (in 3m00s)``, as `nexus ps`
says it, from an injected `now` (the console's clock) so a test can fix the words."""

from __future__ import annotations

from datetime import UTC, datetime

# Seconds in a minute and an hour, for the "in 3m00s" countdown.
_MINUTE = 60
_HOUR = 3600
# Under this many seconds the countdown shows a tenth ("in 4.2s"), as the CLI's does.
_TENTHS_BELOW = 10


def duration(seconds: float) -> str:
    """``4.2s`` / ``42s`` / ``3m00s`` / ``2h05m``: the CLI's spelling (nexus_cli.output)."""
    if seconds < _MINUTE:
        return f"{seconds:.0f}s" if seconds >= _TENTHS_BELOW else f"{seconds:.1f}s"
    if seconds < _HOUR:
        return f"{seconds // _MINUTE:.0f}m{seconds % _MINUTE:02.0f}s"
    return f"{seconds // _HOUR:.0f}h{(seconds % _HOUR) // _MINUTE:02.0f}m"


def _aware(value: datetime | str) -> datetime | None:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def wake_label(until: object, now: datetime) -> str:
    """``14:05 UTC (in 3m00s)`` for a wake time later today, with the date when it is another
    day, ``(due)`` once it has passed (the run stays sleeping until its woken attempt
    starts); "" for None, the text itself when it is not a time.

    The console shows every time in UTC (its `when` filter): a page is read in any zone, and
    the server's own zone means nothing to the reader, where the CLI's local time does.
    """
    if until is None or until == "":
        return ""
    if not isinstance(until, datetime | str):
        return str(until)
    then = _aware(until)
    if then is None:
        return str(until)
    then, current = then.astimezone(UTC), now.astimezone(UTC)
    shown = then.strftime("%H:%M" if then.date() == current.date() else "%Y-%m-%d %H:%M")
    seconds = (then - current).total_seconds()
    return f"{shown} UTC (in {duration(seconds)})" if seconds > 0 else f"{shown} UTC (due)"
