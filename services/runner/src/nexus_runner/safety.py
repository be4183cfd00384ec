"""Secret redaction for events and logs (key shapes and the values a run read), truncation."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import quote

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


# Values shorter than this are not tracked: they would redact ordinary words.
MIN_SECRET_CHARS = 8
# Lines of one secret file (or one shell output that read outside the workspace) tracked.
MAX_LINES_PER_SOURCE = 500
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_.-]*\s*[=:]\s*(.*?)\s*$")


def _base64_variants(raw: bytes) -> Iterable[str]:
    """The base64 text of `raw` as it appears inside a longer encoded text: in each of the
    three alignments, minus the characters that also carry the neighbouring bytes."""
    for pad in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * pad + raw).decode()
            start = (0, 2, 3)[pad]
            end = 4 * ((pad + len(raw)) // 3)
            yield text[start:end]


def _variants(value: str) -> set[str]:
    raw = value.encode()
    found = {value, value[::-1], raw.hex(), raw.hex().upper(), quote(value, safe="")}
    found.update(_base64_variants(raw))
    return {v for v in found if len(v) >= MIN_SECRET_CHARS}


class SecretRegistry:
    """Values the run has read from secret places, redacted wherever the run records them.

    A value is matched whatever its shape (it need not look like a key): as is, reversed,
    hex (either case), URL-quoted and base64 (standard or URL-safe, in any alignment inside
    a longer encoded text). Values come from the runner's own secret settings and
    environment, from `.env`-like files of the workspace and from what the run read outside
    its workspace (`nexus_runner.containment`).
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        self._public: set[str] = set()
        self._variants: set[str] = set()
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
        self._variants |= _variants(value)
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

    def contains(self, text: str) -> bool:
        # Substring tests are C loops: several times cheaper than one regex of hundreds of
        # alternatives, which Python's engine tries one by one at every position.
        return any(variant in text for variant in self._variants)

    def redact_values(self, text: str) -> str:
        """`text` with every tracked value (in any of its encodings) replaced."""
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


def truncate(text: str, cap: int) -> tuple[str, bool]:
    """`text` cut to `cap` characters (with a marker), and whether it was cut."""
    if len(text) <= cap:
        return text, False
    return text[:cap] + f"\n... [{len(text) - cap} characters truncated]", True
