"""A sleeping run in `nexus ps`: its STATUS cell names the wake time and how far it is; and
`nexus run wake` is routed to its command, whose help starts with the line main.py lists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_cli.commands.runs import status_label
from nexus_cli.lazy_group import load_command
from nexus_cli.main import RUN_VERBS
from nexus_cli.output import until

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_the_wake_time_is_local_with_the_time_left() -> None:
    wake = NOW + timedelta(minutes=3)
    local = wake.astimezone().strftime("%H:%M")
    assert until(wake.isoformat(), NOW) == f"{local} (in 3m00s)"
    assert until((NOW - timedelta(seconds=1)).isoformat(), NOW).endswith("(due)")
    later = NOW + timedelta(days=2)
    assert until(later.isoformat(), NOW).startswith(later.astimezone().strftime("%Y-%m-%d "))
    assert until(None) == ""


def test_ps_status_of_a_sleeping_run_a_budget_wait_and_a_plain_run() -> None:
    wake = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert status_label({"status": "sleeping", "sleeping_until": wake}).startswith(
        "sleeping until "
    )
    assert status_label({"status": "queued", "budget_wait": "b"}) == "queued (budget)"
    assert status_label({"status": "running"}) == "running"


def test_run_wake_is_a_command_with_its_listed_summary() -> None:
    for name, entry in RUN_VERBS.items():
        command = load_command(entry)
        assert command.name == name
        assert (command.help or "").split("\n\n")[0].strip() == entry.summary


def test_sleep_event_lines_in_attach_watch_and_events() -> None:
    from nexus_cli.runview import describe

    sleeping = {"until": "2026-11-29T14:05:00Z", "reason": "waiting for CI", "attempt": 1}
    assert describe("sleeping", {**sleeping, "turn": 3}) == (
        "sleeping until 2026-11-29T14:05:00Z: waiting for CI"
    )
    assert describe("wake_requested", {"reason": "CI is green", "requested_by": "ann"}) == (
        "wake requested by ann: CI is green"
    )
    assert describe("wake_requested", {}) == "wake requested"
    woke = {"attempt": 2, "reason": "woke", "wake": {"cause": "message", "text": "done"}}
    assert describe("resuming", woke) == "woke (message): starting attempt 2: done"
    assert describe("resuming", {"attempt": 2, "reason": "woke", "wake": None}) == (
        "woke (?): starting attempt 2"
    )
