"""`nexus doctor` says whether local runs would be confined by bubblewrap, and why."""

from __future__ import annotations

import pytest

from nexus_cli.commands import doctor


def test_doctor_reports_confinement_on_where_bwrap_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEXUS_CONFINEMENT", raising=False)
    monkeypatch.delenv("NEXUS_RUNTIME", raising=False)
    check = doctor._confinement_check()
    assert check is not None
    assert (check.level, check.detail.split(":")[0]) == ("ok", "local runs confined")


@pytest.mark.parametrize(
    ("mode", "level", "detail"),
    [
        ("off", "warn", "local runs NOT confined: turned off"),
        ("sometimes", "fail", "NEXUS_CONFINEMENT='sometimes': use auto, on or off"),
    ],
)
def test_doctor_warns_when_off_and_fails_on_a_bad_mode(
    monkeypatch: pytest.MonkeyPatch, mode: str, level: str, detail: str
) -> None:
    monkeypatch.setenv("NEXUS_CONFINEMENT", mode)
    monkeypatch.delenv("NEXUS_RUNTIME", raising=False)
    check = doctor._confinement_check()
    assert check is not None
    assert check.level == level
    assert check.detail.startswith(detail)


def test_doctor_says_nothing_of_it_for_kubernetes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_RUNTIME", "kubernetes")
    assert doctor._confinement_check() is None
