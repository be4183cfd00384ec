"""Secret redaction for events and logs (key shapes and the values a run read), truncation."""

from __future__ import annotations

import re
from collections.abc import Iterable

from nexus_runner.secret_shapes import (
    MIN_SECRET_CHARS,
    encoded_runs,
    fragments,
    variants,
)

__all__ = [
    "MIN_SECRET_CHARS", "REDACTED", "SECRET_REFUSAL", "SecretRegistry", "redact", "truncate",
]  # fmt: skip

# Token shapes of common providers, plus key=value pairs whose key says "secret".
_SECRET_PATTERNS = [
    re.compile(r"sk-[A-Za-z0-9_-]{16,}"),
    re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"github_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"xox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"AKIA[0-9A-Z]{16}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
    re.compile(
        r"(?i)\b([A-Z0-9_]*(?:password|passwd|secret|token|api[_-]?key)[A-Z0-9_]*)"
        r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"
    ),
    re.compile(r"(?i)(https?://)[^/\s:@]+:[^/\s@]+@"),
]
REDACTED = "[REDACTED]"
# What a call whose arguments hold a secret value of the run (or a piece of one) gets instead.
SECRET_REFUSAL = "refused: the arguments hold a secret value this run read; not run"  # noqa: S105


def redact(text: str) -> str:
    """`text` with anything that looks like a credential replaced by ``[REDACTED]``."""
    for pattern in _SECRET_PATTERNS:
        if pattern.groups == 3:
            text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
        elif pattern.groups == 1:
            text = pattern.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


# Lines of one secret file (or one shell output that read outside the workspace) tracked.
MAX_LINES_PER_SOURCE = 500
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_.-]*\s*[=:]\s*(.*?)\s*$")


class SecretRegistry:
    """Values the run has read from secret places, redacted wherever the run records them.

    A value is matched whatever its shape (it need not look like a key): as is, reversed,
    rot13, hex (either case, and with separators or prefixes: ``73:6b``, ``\\x73``, ``0x73``,
    ``%73``), decimal character codes (``115,107`` or space separated), URL-quoted, base64
    (standard or URL-safe, in any alignment inside a longer encoded text) and gzip or zlib
    data in base64 (`nexus_runner.secret_shapes`). A call's arguments are also refused for a
    piece of a value (`holds_piece`), so a value sent in pieces over several calls is not.
    Values come from the runner's own secret settings and environment, from `.env`-like
    files of the workspace and from what the run read outside its workspace
    (`nexus_runner.containment`).
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        self._public: set[str] = set()
        self._variants: set[str] = set()
        self._pieces: set[str] = set()
        self._longest_first: list[str] | None = None
        for value in values:
            self.add(value)

    def __len__(self) -> int:
        return len(self._values)

    def add(self, value: str | None) -> bool:
        """Track `value` (stripped); False if it is too short or known already."""
        value = (value or "").strip().strip("\"'")
        if len(value) < MIN_SECRET_CHARS or value in self._values or value in self._public:
            return False
        self._values.add(value)
        self._variants |= variants(value)
        self._pieces |= fragments(value)
        self._longest_first = None
        return True

    def allow(self, *values: str | None) -> None:
        """Values known not to be secret (the run's id, branch, paths, plain settings): a
        secret place that also holds them (the runner's own environment) does not make them
        redacted everywhere."""
        self._public.update(v.strip() for v in values if v and v.strip())

    def add_text(self, text: str) -> int:
        """Track what a secret file (or an output read from a secret place) holds: the value
        of each ``KEY=value`` line, else the line itself. Returns how many were new."""
        added = 0
        for raw in text.splitlines()[:MAX_LINES_PER_SOURCE]:
            line = raw.strip()
            if not line or line.startswith(("#", "-----")):
                continue
            match = _ASSIGNMENT.match(line)
            added += self.add(match.group(1) if match else line)
        return added

    def _ordered(self) -> list[str]:
        if self._longest_first is None:
            self._longest_first = sorted(self._variants, key=len, reverse=True)
        return self._longest_first

    def _plainly_in(self, text: str) -> bool:
        # Substring tests are C loops: several times cheaper than one regex of hundreds of
        # alternatives, which Python's engine tries one by one at every position.
        return any(variant in text for variant in self._variants)

    def contains(self, text: str) -> bool:
        """Whether `text` holds a tracked value in any of its shapes."""
        if not self._values:
            return False
        if self._plainly_in(text):
            return True
        return any(self._plainly_in(run.decoded) for run in encoded_runs(text))

    def holds_piece(self, text: str) -> bool:
        """Whether `text` holds a tracked value or a piece of one (`secret_shapes.fragments`):
        what a call's arguments are refused for."""
        if self.contains(text):
            return True
        if not self._pieces:
            return False
        width = len(next(iter(self._pieces)))
        pieces = self._pieces
        return any(text[i : i + width] in pieces for i in range(len(text) - width + 1))

    def redact_values(self, text: str) -> str:
        """`text` with every tracked value (in any of its shapes) replaced."""
        if not self._values:
            return text
        hits = sorted(
            (run.start, run.end) for run in encoded_runs(text) if self._plainly_in(run.decoded)
        )
        for start, end in reversed(_merged(hits)):
            text = text[:start] + REDACTED + text[end:]
        for variant in self._ordered():  # longest first: a value inside a longer one
            if variant in text:
                text = text.replace(variant, REDACTED)
        return text

    def redact(self, text: str) -> str:
        """`redact` (known key shapes) and the tracked values."""
        return redact(self.redact_values(text))

    def redact_tree(self, value: object) -> object:
        """A JSON-like value with the tracked values redacted from every string in it."""
        if isinstance(value, str):
            return self.redact_values(value)
        if isinstance(value, dict):
            return {self.redact_values(str(k)): self.redact_tree(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact_tree(v) for v in value]
        return value


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans with the overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def truncate(text: str, cap: int) -> tuple[str, bool]:
    """`text` cut to `cap` characters (with a marker), and whether it was cut."""
    if len(text) <= cap:
        return text, False
    return text[:cap] + f"\n... [{len(text) - cap} characters truncated]", True
