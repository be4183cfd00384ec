"""Say which MongoDB the catalog backend tests run against (a real server or mongomock-motor)."""

from __future__ import annotations

from typing import Any

from .integration.support import MONGODB_URL_ENV, mongodb_mode


def _line() -> str:
    if mongodb_mode() == "mongodb-real":
        return f"core catalog: MongoDB backend tested against a real server ({MONGODB_URL_ENV})"
    return (
        "core catalog: MongoDB backend tested against mongomock-motor, not a real server"
        f" (set {MONGODB_URL_ENV}=mongodb://... for one)"
    )


def pytest_report_header(config: Any) -> str:
    # Shown when pytest starts in services/core; the summary line below covers other roots.
    return _line()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(_line())
