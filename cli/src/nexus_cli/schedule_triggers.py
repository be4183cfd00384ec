"""A schedule's trigger checked before it is published, so a typo is one error line here
instead of a dead letter in the scheduler: the same cron library and time zones it uses."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from nexus_cli.errors import CliError


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CliError(
            f"unknown time zone {name!r}", hint="an IANA name: UTC, Europe/Paris, America/New_York"
        ) from None


def validate_cron(expr: str) -> None:
    """The scheduler reads 5 fields (minute hour day month weekday)."""
    if len(expr.split()) != 5 or not croniter.is_valid(expr):
        raise CliError(
            f"invalid cron expression {expr!r}",
            hint="5 fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * 1-5'",
        )


def parse_at(value: str, timezone: str) -> datetime:
    """An ISO 8601 time; without an offset it is read in `timezone`."""
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise CliError(
            f"invalid --at {value!r}", hint="ISO 8601, e.g. 2026-12-01T09:00 or 2026-12-01T09:00Z"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=zone(timezone))
