"""Finds run and flow vocabulary (event names, statuses) spelt as string literals in code.

The contract's enums are the one spelling of that vocabulary (docs/contract.md, "Run states");
this scanner reads the services' and the CLI's Python with `ast` and reports every string
constant equal to one of their values, so a test can hold the code to the enums.
"""

from __future__ import annotations

import ast
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nexus_events.contract.runstate import RunEvent, RunStatus
from nexus_events.contract.subjects import Family
from nexus_events.events import FlowStatus, FlowStepFinished, registered

ROOT = Path(__file__).resolve().parents[2]
# Where the vocabulary is used rather than defined: every service's and the CLI's own code.
SCANNED = ("services/*/src/**/*.py", "cli/src/**/*.py")


def _literal_values(model: type[object], field: str) -> frozenset[str]:
    annotation = typing.get_type_hints(model)[field]
    return frozenset(str(v) for v in typing.get_args(annotation))


def run_vocabulary() -> frozenset[str]:
    """Every run event name and run status value."""
    return frozenset(RunEvent) | frozenset(RunStatus)


def flow_vocabulary() -> frozenset[str]:
    """Every flow event name, flow status and step outcome, read from the contract's models.

    Flow event names come from the registry (the models' ``event_name``), step outcomes from
    `FlowStepFinished.status`'s Literal, so this follows the contract whether or not it has a
    flow event enum yet.
    """
    names = {name for family, name in registered() if family is Family.FLOW}
    return frozenset(names) | frozenset(FlowStatus) | _literal_values(FlowStepFinished, "status")


@dataclass(frozen=True, order=True)
class Literal:
    """One vocabulary word spelt as a string literal: where, in which scope, which word."""

    path: str  # relative to the repository root
    line: int
    scope: str  # dotted qualified name of the enclosing classes/functions, "" at module level
    value: str

    @property
    def key(self) -> tuple[str, str, str]:
        """What an allowlist entry names: stable across edits that only move lines."""
        return (self.path, self.scope, self.value)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    docs: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
        ):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return docs


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str, words: frozenset[str], docstrings: set[int]) -> None:
        self.path = path
        self.words = words
        self.docstrings = docstrings
        self.scope: list[str] = []
        self.found: list[Literal] = []

    def _scoped(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_ClassDef = _scoped  # noqa: N815 - ast.NodeVisitor's naming
    visit_FunctionDef = _scoped  # noqa: N815
    visit_AsyncFunctionDef = _scoped  # noqa: N815

    def visit_Constant(self, node: ast.Constant) -> None:
        if (
            isinstance(node.value, str)
            and node.value in self.words
            and id(node) not in self.docstrings
        ):
            self.found.append(Literal(self.path, node.lineno, ".".join(self.scope), node.value))


def scan_source(path: str, source: str, words: frozenset[str]) -> list[Literal]:
    """The literals of one module's source equal to one of `words` (docstrings excepted)."""
    tree = ast.parse(source, filename=path)
    finder = _Finder(path, words, _docstring_nodes(tree))
    finder.visit(tree)
    return finder.found


def scanned_files(root: Path = ROOT) -> Iterator[Path]:
    for pattern in SCANNED:
        yield from sorted(root.glob(pattern))


def scan(words: frozenset[str], root: Path = ROOT) -> list[Literal]:
    """Every vocabulary literal in the scanned code, sorted by place."""
    found: list[Literal] = []
    for file in scanned_files(root):
        rel = file.relative_to(root).as_posix()
        found.extend(scan_source(rel, file.read_text(encoding="utf-8"), words))
    return sorted(found)


if __name__ == "__main__":
    from collections import Counter

    words = run_vocabulary() | flow_vocabulary()
    hits = scan(words)
    by_file = Counter(h.path for h in hits)
    for path, count in by_file.most_common():
        print(f"{count:4d} {path}")
    run_only = [h for h in hits if h.value in run_vocabulary()]
    print("total", len(hits), "run-vocabulary", len(run_only), "files", len(by_file))
