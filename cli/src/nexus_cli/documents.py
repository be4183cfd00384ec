"""Reading catalog documents from files and directories, every problem reported at once.

Parsing and validation are the contract's (`nexus_events.contract.documents`); this module only
finds the files and attaches the file name to each field error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from nexus_events.contract.documents import parse_agent, parse_skill
from nexus_events.errors import DocumentInvalid
from nexus_events.events import AgentDefinition, SkillDefinition

from nexus_cli.errors import CliError, ExitCode

AGENT_SUFFIXES = (".yaml", ".yml", ".json")
SKILL_SUFFIXES = (".md",)
D = TypeVar("D")


@dataclass(frozen=True)
class Loaded(Generic[D]):
    path: Path
    document: D


def document_files(paths: list[Path], suffixes: tuple[str, ...]) -> list[Path]:
    """The files named, and those of each directory named with one of `suffixes`, sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if p.suffix in suffixes and p.is_file()))
        elif path.is_file():
            found.append(path)
        else:
            raise CliError(f"no such file or directory: {path}", code=ExitCode.NOT_FOUND)
    if not found:
        raise CliError(
            f"no {'/'.join(suffixes)} files in {', '.join(str(p) for p in paths)}",
            code=ExitCode.INVALID,
        )
    return found


def _load(
    paths: list[Path], suffixes: tuple[str, ...], kind: str, parse: Callable[[Path, str], D]
) -> list[Loaded[D]]:
    loaded: list[Loaded[D]] = []
    problems: list[str] = []
    for path in document_files(paths, suffixes):
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot read: {exc}")
            continue
        try:
            loaded.append(Loaded(path, parse(path, text)))
        except DocumentInvalid as exc:
            problems.extend(f"{path}: {err.loc}: {err.msg}" for err in exc.errors)
    if problems:
        raise CliError(
            f"invalid {kind} document(s); nothing was applied",
            details=problems,
            hint="fix the fields above and apply again",
            code=ExitCode.INVALID,
        )
    ids = [getattr(x.document, "id", None) or getattr(x.document, "name", None) for x in loaded]
    dupes = sorted({i for i in ids if ids.count(i) > 1 and i is not None})
    if dupes:
        raise CliError(
            f"the same {kind} is defined twice: {', '.join(dupes)}; nothing was applied",
            code=ExitCode.INVALID,
        )
    return loaded


def load_agents(paths: list[Path]) -> list[Loaded[AgentDefinition]]:
    return _load(paths, AGENT_SUFFIXES, "agent", lambda _p, text: parse_agent(text))


def load_skills(paths: list[Path]) -> list[Loaded[SkillDefinition]]:
    return _load(paths, SKILL_SUFFIXES, "skill", lambda p, text: parse_skill(text, name=p.stem))


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """The YAML mapping in `path` (a budget, an eval suite); a one-line `CliError` (exit 2)
    naming the file when it cannot be read, is not YAML or is not a mapping."""
    try:
        data: Any = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: cannot read: {exc}", code=ExitCode.INVALID) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise CliError(f"{path}: not valid YAML{where}: {problem}", code=ExitCode.INVALID) from None
    if not isinstance(data, dict):
        got = "nothing" if data is None else type(data).__name__
        raise CliError(f"{path}: {what} must be a mapping, got {got}", code=ExitCode.INVALID)
    return data
