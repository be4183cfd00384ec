"""What an approver is shown of a tool call: the whole call, normalised so padding, control
characters or length cannot hide what it does, with the programs a command runs named."""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from nexus_runner.guard.shell import classify
from nexus_runner.safety import redact

# The summary's length at most: what a chat message or a Plane comment shows whole (Telegram
# caps a message at 4096 characters, the approval's own text included).
MAX_SUMMARY_CHARS = 3_000
# Of a call still longer once normalised: how much of its start and of its end is shown.
KEPT_EACH_END = 1_300
# Runs of spaces and tabs (and other blanks but the newline) become one space.
_BLANKS = re.compile(r"[^\S\n]+")
_BLANK_LINES = re.compile(r"\n(?:[^\S\n]*\n)+")


def call_summary(tool: str, raw: dict[str, Any]) -> str:
    """The approval summary of a call of `tool` with arguments `raw`.

    A command (``run_shell``'s ``command``) is shown as the command, other calls as their
    JSON arguments; either way: whitespace runs collapsed (said when any were), invisible
    and control characters shown as ``<U+XXXX>``, the length in characters, the programs a
    command runs (from the guard's shell parser), and, past `MAX_SUMMARY_CHARS`, its start
    AND its end with how much was left out between them. Known key shapes are redacted.
    """
    command = raw.get("command")
    text = command if isinstance(command, str) else json.dumps(raw, ensure_ascii=False)
    shown, collapsed = _normalised(text)
    facts = [f"{len(text):,} characters"]
    if collapsed:
        facts.append(f"whitespace collapsed to {len(shown):,}")
    if isinstance(command, str):
        programs = [_normalised(name)[0] for name in classify(command).programs]
        facts.insert(0, "runs: " + (", ".join(programs) if programs else "nothing"))
    shown = redact(shown)
    if len(shown) > MAX_SUMMARY_CHARS:
        elided = len(shown) - 2 * KEPT_EACH_END
        shown = (
            f"{shown[:KEPT_EACH_END]}\n… [{elided:,} characters not shown] …\n"
            f"{shown[-KEPT_EACH_END:]}"
        )
    return f"{tool}: {shown}\n({'; '.join(facts)})"


def _normalised(text: str) -> tuple[str, bool]:
    """`text` with blank runs collapsed and invisible characters made visible; and whether
    any whitespace was collapsed."""
    visible = "".join(_visible(c) for c in text)
    collapsed = _BLANK_LINES.sub("\n", _BLANKS.sub(" ", visible)).strip()
    lines = "\n".join(line.strip() for line in collapsed.split("\n"))
    return lines, lines != visible


def _visible(char: str) -> str:
    """A character as an approver should see it: format and control characters (a
    right-to-left override, a zero-width space, a carriage return, an escape) by code."""
    if char in "\n\t ":
        return char
    if unicodedata.category(char) in {"Cc", "Cf", "Co", "Cs"}:
        return f"<U+{ord(char):04X}>"
    return char
