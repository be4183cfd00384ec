"""Reading budgets (``budgets/*.yaml``) from files and directories for `nexus budgets apply`.

Every file is validated with the contract's `BudgetDefinition` before anything is published;
the first problem is one line naming the file, the field and pydantic's message (exit 2).
"""

from __future__ import annotations

from pathlib import Path

from nexus_events.events.budgets import BudgetDefinition
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from nexus_cli.documents import AGENT_SUFFIXES, Loaded, document_files, read_mapping
from nexus_cli.errors import CliError, ExitCode

# Budgets are YAML (or JSON, which YAML reads), as agent definitions are.
BUDGET_SUFFIXES = AGENT_SUFFIXES
_VALUE_ERROR = "Value error, "


def _field(err: ErrorDetails) -> str:
    """``('limits', 'cost_usd')`` -> ``limits.cost_usd``; a model-level error names the
    document."""
    text = ""
    for part in err["loc"]:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(document)"


def parse_budget(path: Path) -> BudgetDefinition:
    """The budget in `path`; a one-line `CliError` (exit 2): ``FILE: field: message``."""
    data = read_mapping(path, "a budget")
    try:
        return BudgetDefinition.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        text = f"{path}: {_field(first)}: {first['msg'].removeprefix(_VALUE_ERROR)}"
        raise CliError(text, code=ExitCode.INVALID) from None


def load_budgets(paths: list[Path]) -> list[Loaded[BudgetDefinition]]:
    """Every budget named (files, or the budget files of directories), all valid, ids unique."""
    files = document_files(paths, BUDGET_SUFFIXES)
    loaded = [Loaded(path, parse_budget(path)) for path in files]
    seen: dict[str, Path] = {}
    for item in loaded:
        first = seen.setdefault(item.document.id, item.path)
        if first != item.path:
            raise CliError(
                f"{item.path}: budget {item.document.id!r} is also defined in {first}",
                code=ExitCode.INVALID,
            )
    return loaded
