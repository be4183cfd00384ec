"""Test support (`nexus_testing`) stays out of what ships: no shipped module imports it and no
shipped package depends on it, so the images (deploy/docker/install.sh) never need it."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Every package an image installs: the contract, the services, the CLI.
SHIPPED = [
    ROOT / "libs" / "nexus_events",
    *sorted(p.parent for p in (ROOT / "services").glob("*/pyproject.toml")),
    ROOT / "cli",
]


def _imported_modules(source: Path) -> set[str]:
    tree = ast.parse(source.read_text(), filename=str(source))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and not node.level:
            names.add(node.module)
    return names


def test_no_shipped_module_imports_the_test_support() -> None:
    sources = [p for pkg in SHIPPED for p in (pkg / "src").rglob("*.py")]
    assert len(sources) > 100  # the packages' sources were found (not an empty pass)
    offenders = [
        f"{p.relative_to(ROOT)}: {name}"
        for p in sources
        for name in _imported_modules(p)
        if name == "nexus_testing" or name.startswith("nexus_testing.")
    ]
    assert offenders == []


def test_no_shipped_package_depends_on_the_test_support() -> None:
    for pkg in SHIPPED:
        project = tomllib.loads((pkg / "pyproject.toml").read_text())["project"]
        wanted = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            wanted += extra
        assert not [d for d in wanted if d.startswith("nexus-testing")], pkg.name


def test_the_contract_carries_no_pytest_plugin() -> None:
    # The plugin moved out of nexus_events: its module and its `testing` extra are gone.
    events = ROOT / "libs" / "nexus_events"
    assert not (events / "src" / "nexus_events" / "testing.py").exists()
    extras = tomllib.loads((events / "pyproject.toml").read_text())["project"]
    assert "testing" not in extras.get("optional-dependencies", {})
