"""Classify a shell command on a real parse tree (tree-sitter-bash), not on its text.

Every simple command — in lists (`&&`, `;`, `||`), pipelines, loops, command and process
substitutions, and `bash -c` strings — is judged on its words with quoting already removed
(`gi''t` is `git`); the command's class is the most severe of its parts. Whatever has a
syntax error, and the forms the walker does not judge (`[[ … ]]`, `case`, arithmetic), are
destructive: the guard fails closed.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Final

from nexus_runner.guard import table
from nexus_runner.guard.programs import RULES
from nexus_runner.guard.walker import SEVERITY, Classification, CommandClass, walk

__all__ = ["HANDLED", "SEVERITY", "Classification", "CommandClass", "classify"]

# Programs judged by their arguments (the docs table lists them; wrappers have their own row).
HANDLED: Final = frozenset(RULES) - table.WRAPPERS


@functools.lru_cache(maxsize=256)  # decide asks twice per call (dial, push/commit refusal)
def classify(command: str, workspace: Path | None = None) -> Classification:
    """The class of `command` run in `workspace` (absolute paths under it are inside)."""
    return walk(command, workspace, 0, RULES)
