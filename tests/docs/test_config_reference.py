"""README's configuration reference lists every setting the services read, as generated."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from scripts.config_reference import SECTIONS, table

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize(("title", "module", "name"), SECTIONS, ids=[s[2] for s in SECTIONS])
def test_every_setting_is_documented_as_generated(title: str, module: str, name: str) -> None:
    readme = README.read_text()
    cls = getattr(importlib.import_module(module), name)
    rows = table(cls).splitlines()[2:]  # past the header
    missing = [row for row in rows if row not in readme]
    assert not missing, (
        f"README's {title} table is out of date; regenerate it with "
        f"`uv run python -m scripts.config_reference`. Missing or changed: {missing}"
    )
