"""Secret redaction for events and logs, and detection of destructive shell commands."""

from __future__ import annotations

import re

from nexus_runner.guard.shell import classify

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


def truncate(text: str, cap: int) -> tuple[str, bool]:
    """`text` cut to `cap` characters (with a marker), and whether it was cut."""
    if len(text) <= cap:
        return text, False
    return text[:cap] + f"\n... [{len(text) - cap} characters truncated]", True


def destructive_reason(command: str) -> str | None:
    """Why `command` needs a human's approval whatever the dial, or None (nexus_runner.guard)."""
    found = classify(command)
    return found.reason if found.command_class == "destructive" else None
