"""The licence check fails on a copyleft runtime dependency: on the workspace as installed, and
on fake distributions (real metadata records in a temporary directory) that bring one in."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from scripts import licence_check
from scripts.licence_check import ALLOWED, REVIEWED_LGPL, WORKSPACE, check, closure, is_copyleft


def test_the_workspace_runtime_closure_has_no_copyleft_or_unknown_licence() -> None:
    found = closure(WORKSPACE)
    assert {"nexus-runner", "tree-sitter", "tree-sitter-bash", "nats-py"} <= set(found)
    assert "pytest" not in found  # dev tools ship in no image
    assert check() == []


def test_every_hand_checked_entry_is_still_a_runtime_dependency() -> None:
    found = closure(WORKSPACE)
    assert set(ALLOWED) | set(REVIEWED_LGPL) <= set(found)


def _dist(root: Path, name: str, *headers: str) -> None:
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    lines = ["Metadata-Version: 2.4", f"Name: {name}", "Version: 1.0", *headers]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def _finder(root: Path) -> licence_check.Find:
    def find(name: str) -> metadata.Distribution | None:
        return next(iter(metadata.distributions(name=name, path=[str(root)])), None)

    return find


def test_a_copyleft_dependency_fails_the_check(tmp_path: Path) -> None:
    _dist(tmp_path, "fake-service", "Requires-Dist: fake-lib", "License-Expression: Apache-2.0")
    _dist(tmp_path, "fake-lib", "Requires-Dist: fake-parser>=1", "License-Expression: MIT")
    _dist(tmp_path, "fake-parser", "License-Expression: GPL-3.0-or-later")
    findings = check(["fake-service"], _finder(tmp_path))
    assert [(f.package, f.licence, f.problem) for f in findings] == [
        ("fake-parser", "GPL-3.0-or-later", "copyleft")
    ]


def test_the_command_exits_non_zero_on_a_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _dist(tmp_path, "nexus-runner", "Requires-Dist: fake-agpl", "License-Expression: Apache-2.0")
    _dist(
        tmp_path,
        "fake-agpl",
        "Classifier: License :: OSI Approved :: GNU Affero General Public License v3",
    )
    assert licence_check.main(_finder(tmp_path)) == 1
    assert "fake-agpl: copyleft licence" in capsys.readouterr().err


def test_every_workspace_package_declares_apache_2() -> None:
    for name in WORKSPACE:
        assert metadata.metadata(name).get_all("License-Expression") == ["Apache-2.0"], name
    licence = (Path(__file__).resolve().parents[2] / "LICENSE").read_text()
    assert "Apache License" in licence
    assert "Version 2.0, January 2004" in licence


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        (
            ["Classifier: License :: OSI Approved :: GNU General Public License v3 (GPLv3)"],
            "copyleft",
        ),
        (
            ["License: GNU LESSER GENERAL PUBLIC LICENSE\n        Version 3, 29 June 2007"],
            "copyleft",
        ),
        (["License-Expression: SSPL-1.0"], "copyleft"),
        (["License-Expression: LGPL-2.1-or-later"], "copyleft"),
        (["License: UNKNOWN"], "unknown"),
        ([], "unknown"),
        (["License-Expression: MPL-2.0"], None),  # file-level copyleft: shipped unmodified
        (["License-Expression: MIT OR GPL-2.0-only"], None),  # one alternative is permissive
        (["License: BSD-3-Clause", "Classifier: License :: OSI Approved :: BSD License"], None),
    ],
)
def test_what_each_kind_of_metadata_says(
    tmp_path: Path, headers: list[str], problem: str | None
) -> None:
    _dist(tmp_path, "fake-root", "Requires-Dist: fake-dep", "License-Expression: MIT")
    _dist(tmp_path, "fake-dep", *headers)
    found = [f.problem for f in check(["fake-root"], _finder(tmp_path))]
    assert found == ([problem] if problem else [])


def test_optional_and_foreign_platform_dependencies_are_not_in_the_closure(tmp_path: Path) -> None:
    _dist(
        tmp_path,
        "fake-root",
        'Requires-Dist: fake-gpl; extra == "docs"',
        'Requires-Dist: fake-win; sys_platform == "win32"',
        "Requires-Dist: fake-extra[fast]",
        "License-Expression: MIT",
    )
    _dist(tmp_path, "fake-gpl", "License-Expression: GPL-2.0-only")
    _dist(tmp_path, "fake-win", "License-Expression: GPL-2.0-only")
    _dist(
        tmp_path,
        "fake-extra",
        'Requires-Dist: fake-speed; extra == "fast"',
        "License-Expression: MIT",
    )
    _dist(tmp_path, "fake-speed", "License-Expression: AGPL-3.0-only")
    findings = check(["fake-root"], _finder(tmp_path))
    # The extra a requirement asks for is followed; the ones nobody asks for are not.
    assert [f.package for f in findings] == ["fake-speed"]


def test_a_licence_with_only_copyleft_alternatives_is_copyleft() -> None:
    assert is_copyleft("LGPL-3.0-only")
    assert not is_copyleft("Apache-2.0")
    assert is_copyleft("(GPL-2.0-only OR AGPL-3.0-only)")
