"""Say which MongoDB server the catalog backend tests run against (NEXUS_TEST_MONGODB_URL or
SecantusDB), or why there is none."""

from __future__ import annotations

from typing import Any

from .integration.mongo_server import mongo_choice


def _line() -> str:
    return f"core catalog: MongoDB backend tested against {mongo_choice().why}"


def pytest_report_header(config: Any) -> str:
    # Shown when pytest starts in services/core; the summary line below covers other roots.
    return _line()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(_line())
