"""Every document the repository's text files cite is in the repository.

A citation of a document the next person cannot open (the team's old design brief, a notes
file outside the checkout) reads as a pointer and leads nowhere; these tests list each one with
its file and line.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
# This file spells out the patterns it looks for.
SELF = PurePosixPath(Path(__file__).resolve().relative_to(ROOT).as_posix())

# The old design brief by name ("DESIGN.md section 5", "DESIGN §8"): it was never in the repo.
OLD_DESIGN_BRIEF = re.compile(r"\bDESIGN(?:\.md\b|\s*§|\s+section\b)")
# Paths out of the checkout into the team's shared notes.
OUTSIDE_PATHS = re.compile(r"\.\./shared/|/work/shared\b")
# The team's notes that were never in the repository (its facts and style belong in docs/).
OUTSIDE_NOTES = re.compile(r"\b(?:REFERENCE|STYLE)\.md\b")
# A repository path of a doc ("docs/resume.md"), as prose or code comments name them. Tests
# are left out: their workspaces hold made-up files (docs/notes.md) that are no citation.
DOCS_PATH = re.compile(r"(?<![\w./-])(docs/[\w./-]+?\.md)\b")
# A markdown link to a relative .md file, with an optional anchor: [text](sandbox.md#egress).
MD_LINK = re.compile(r"\]\(([^)\s#]+\.md)(?:#[^)\s]*)?\)")
# A section of the design doc: "docs/design.md §5", "design.md §5.2", "design.md section 5".
DESIGN_SECTION = re.compile(r"design\.md\s*(?:§|section\s+)\s*(\d+(?:\.\d+)*)")
DESIGN_HEADING = re.compile(r"^#{2,4}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)


@cache
def tracked_files() -> tuple[PurePosixPath, ...]:
    """The repository's tracked files (`git ls-files`), relative to its root."""
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.decode()
    return tuple(PurePosixPath(p) for p in out.split("\0") if p)


def text_lines() -> Iterator[tuple[PurePosixPath, int, str]]:
    """(path, line number, line) of every tracked text file but this one."""
    for path in tracked_files():
        if path == SELF:
            continue
        try:
            text = (ROOT / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary, or deleted in the work tree and not yet committed
        if "\0" in text:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            yield path, number, line


def _report(problems: list[str], what: str) -> str:
    return f"{len(problems)} {what}:\n" + "\n".join(f"  {p}" for p in problems)


def test_nothing_cites_the_old_design_brief() -> None:
    problems = [
        f"{path}:{n}: {line.strip()}"
        for path, n, line in text_lines()
        if OLD_DESIGN_BRIEF.search(line)
    ]
    assert not problems, _report(
        problems, "citations of DESIGN.md, which is not in the repository (cite docs/design.md §N)"
    )


def test_nothing_cites_a_path_outside_the_repository() -> None:
    problems = [
        f"{path}:{n}: {line.strip()}"
        for path, n, line in text_lines()
        if OUTSIDE_PATHS.search(line)
    ]
    assert not problems, _report(problems, "citations of paths outside the repository")


def test_nothing_cites_the_teams_notes_outside_the_repository() -> None:
    problems = [
        f"{path}:{n}: {line.strip()}"
        for path, n, line in text_lines()
        if OUTSIDE_NOTES.search(line)
    ]
    assert not problems, _report(problems, "citations of notes that are not in the repository")


def test_every_docs_path_named_exists() -> None:
    tracked = set(tracked_files())
    problems = [
        f"{path}:{n}: {doc}"
        for path, n, line in text_lines()
        if "tests" not in path.parts
        for doc in DOCS_PATH.findall(line)
        if PurePosixPath(doc) not in tracked
    ]
    assert not problems, _report(problems, "docs/... paths that are not in the repository")


def test_every_relative_markdown_link_to_an_md_file_resolves() -> None:
    problems = []
    for path, n, line in text_lines():
        if path.suffix != ".md":
            continue
        for target in MD_LINK.findall(line):
            if "://" in target or target.startswith("/"):
                continue
            if not (ROOT / path.parent / target).resolve().is_file():
                problems.append(f"{path}:{n}: {target}")
    assert not problems, _report(problems, "markdown links to .md files that do not exist")


def test_every_design_section_cited_exists() -> None:
    sections = set(DESIGN_HEADING.findall(DESIGN.read_text(encoding="utf-8")))
    problems = [
        f"{path}:{n}: §{number}"
        for path, n, line in text_lines()
        for number in DESIGN_SECTION.findall(line)
        if number not in sections
    ]
    assert not problems, _report(
        problems, f"citations of sections docs/design.md lacks {sorted(sections)}"
    )


def test_every_section_design_md_cites_of_itself_exists() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    sections = set(DESIGN_HEADING.findall(text))
    cited = set(re.findall(r"§(\d+(?:\.\d+)*)", text))
    assert cited, "docs/design.md cites none of its own sections: is the pattern still right?"
    assert cited <= sections, f"docs/design.md cites sections it lacks: {sorted(cited - sections)}"
