"""Reading eval suites (``evals/*.yaml``) from files and directories for `nexus eval apply`.

Every file is validated before anything is published; the first problem found is reported as
one line naming the file, the field and what is wrong (exit 2).
"""

from __future__ import annotations

from pathlib import Path

from nexus_events.events import EvalSuite
from nexus_events.events.evals import GRADER_KINDS
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from nexus_cli.documents import AGENT_SUFFIXES, Loaded, document_files, read_mapping
from nexus_cli.errors import CliError, ExitCode

# Suites are YAML (or JSON, which YAML reads), as agent definitions are.
SUITE_SUFFIXES = AGENT_SUFFIXES
_VALUE_ERROR = "Value error, "


def _where(loc: tuple[int | str, ...]) -> str:
    """``('cases', 0, 'graders', 1, 'kind')`` -> ``cases[0].graders[1].kind``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(document)"


def _problem(err: ErrorDetails) -> str:
    """One field error as people read it; an unknown grader kind names the known ones."""
    loc = err["loc"]
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        given = err.get("input", {})
        kind = given.get("kind") if isinstance(given, dict) else None
        what = f"unknown grader kind {kind!r}" if kind is not None else "a grader needs a kind"
        return f"{_where((*loc, 'kind'))}: {what} (one of: {', '.join(GRADER_KINDS)})"
    # A discriminated union puts the tag in the location (graders[0].max_cost.usd): drop it.
    loc = tuple(p for i, p in enumerate(loc) if not (p in GRADER_KINDS and i > 0))
    return f"{_where(loc)}: {err['msg'].removeprefix(_VALUE_ERROR)}"


def parse_suite(path: Path) -> EvalSuite:
    """The suite in `path`; a one-line `CliError` (exit 2) naming the file and the problem."""
    data = read_mapping(path, "a suite")
    try:
        return EvalSuite.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise CliError(f"{path}: {_problem(errors[0])}{more}", code=ExitCode.INVALID) from None


def load_suites(paths: list[Path]) -> list[Loaded[EvalSuite]]:
    """Every suite named (files, or the suite files of directories), all valid, ids unique."""
    loaded = [Loaded(path, parse_suite(path)) for path in document_files(paths, SUITE_SUFFIXES)]
    seen: dict[str, Path] = {}
    for item in loaded:
        first = seen.setdefault(item.document.id, item.path)
        if first != item.path:
            raise CliError(
                f"{item.path}: suite {item.document.id!r} is also defined in {first}",
                code=ExitCode.INVALID,
            )
    return loaded
