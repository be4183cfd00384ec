"""The words for a sleeping run's wake time, from a given `now`: the CLI's countdown, the
date only when the wake is another day, "due" once passed, and input that is not a time
shown as it came."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from nexus_console.sleep_view import duration, wake_label

NOW = datetime(2026, 11, 29, 14, 2, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(4.24, "4.2s"), (42, "42s"), (180, "3m00s"), (3725, "1h02m"), (7500, "2h05m")],
)
def test_durations_are_spelled_as_the_cli_spells_them(seconds: float, words: str) -> None:
    assert duration(seconds) == words


def test_a_wake_later_today_is_its_time_and_countdown() -> None:
    assert wake_label(NOW + timedelta(minutes=3), NOW) == "14:05 UTC (in 3m00s)"
    assert wake_label("2026-11-29T14:05:30Z", NOW) == "14:05 UTC (in 3m00s)"


def test_a_wake_on_another_day_carries_its_date() -> None:
    assert wake_label("2026-11-30T09:00:00+00:00", NOW) == "2026-11-30 09:00 UTC (in 18h57m)"


def test_times_in_other_zones_and_naive_ones_are_shown_in_utc() -> None:
    paris = datetime(2026, 11, 29, 16, 0, 30, tzinfo=timezone(timedelta(hours=1)))
    assert wake_label(paris, NOW) == "15:00 UTC (in 58m00s)"
    assert wake_label("2026-11-29T14:12:30", NOW) == "14:12 UTC (in 10m00s)"


def test_a_passed_wake_is_due() -> None:
    assert wake_label(NOW - timedelta(seconds=1), NOW) == "14:02 UTC (due)"
    assert wake_label(NOW, NOW) == "14:02 UTC (due)"


def test_nothing_and_what_is_not_a_time() -> None:
    assert wake_label(None, NOW) == ""
    assert wake_label("", NOW) == ""
    assert wake_label("next tuesday", NOW) == "next tuesday"
