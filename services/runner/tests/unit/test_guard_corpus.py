"""Every command of the guard corpus (data/guard_corpus.tsv) gets its expected class."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus_runner.guard.shell import classify
from nexus_runner.guard.table import markdown_table

CORPUS = Path(__file__).parent / "data" / "guard_corpus.tsv"
WORKSPACE = Path("/work/ws")
DOCS = Path(__file__).resolve().parents[4] / "docs" / "guardrails.md"


def corpus() -> list[tuple[str, str]]:
    rows = []
    for line in CORPUS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            expected, command = line.split("\t", 1)
            rows.append((expected, command.replace("\\n", "\n")))
    return rows


def test_the_corpus_is_large_and_covers_every_class() -> None:
    rows = corpus()
    assert len(rows) >= 150
    assert {e for e, _ in rows} == {
        "read_only",
        "workspace_write",
        "outside_workspace",
        "network",
        "destructive",
    }


@pytest.mark.parametrize(("expected", "command"), corpus(), ids=lambda v: v[:40])
def test_corpus_command_is_classified(expected: str, command: str) -> None:
    got = classify(command, WORKSPACE)
    assert got.command_class == expected, got.reasons


def test_the_docs_show_the_table_and_the_corpus_as_they_are() -> None:
    text = DOCS.read_text()
    start, end = "<!-- guard-table:start -->\n", "\n<!-- guard-table:end -->"
    shown = text[text.index(start) + len(start) : text.index(end)]
    assert shown == markdown_table(), "regenerate: python -m nexus_runner.guard.table"
    total = len(corpus())
    assert f"holds {total} commands" in text
    assert f"**{total} of {total} (100%)**" in text
