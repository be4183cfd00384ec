"""Secret redaction for events and logs, and detection of destructive shell commands."""

from __future__ import annotations

import re
import shlex

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


_PIPE_TO_SHELL = re.compile(r"\b(curl|wget)\b[^|;&]*\|\s*(sudo\s+)?(ba|z|da|k)?sh\b")
_GIT_INTERNALS = re.compile(r"(^|[\s/'\">])\.git/")
_FORCE_PUSH = re.compile(r"\bgit\b.*\bpush\b.*(\s--force\b|\s-f\b|\s--force-with-lease\b|\s\+\S)")
_DANGEROUS = [
    (re.compile(r"\bmkfs(\.\w+)?\b|\bdd\b.*\bof=/dev/"), "formats or overwrites a device"),
    (re.compile(r":\(\)\s*\{\s*:\|:&\s*\};:"), "fork bomb"),
    (re.compile(r"\bchmod\s+-R\s+777\s+/"), "opens permissions on the whole system"),
    (re.compile(r"\bgit\b.*\breset\s+--hard\s+\S*origin"), "discards work to match a remote"),
    (re.compile(r"\bsudo\b"), "runs as root"),
]


def _rm_outside(tokens: list[str]) -> bool:
    # `rm -rf <target>` is destructive unless every target is a plain relative path.
    recursive = any(t.startswith("-") and ("r" in t.lower() or t == "--recursive") for t in tokens)
    if not recursive:
        return False
    targets = [t for t in tokens[1:] if not t.startswith("-")]
    if not targets:
        return False
    for t in targets:
        if t.startswith(("/", "~", "$")) or ".." in t.split("/") or t in {"*", ".", "./"}:
            return True
    return False


def destructive_reason(command: str) -> str | None:
    """Why `command` needs a human's approval, or None if it looks safe to run unattended."""
    if _PIPE_TO_SHELL.search(command):
        return "pipes a download into a shell"
    if _FORCE_PUSH.search(command):
        return "force-pushes"
    if _GIT_INTERNALS.search(command) and re.search(
        r">|\btee\b|\brm\b|\bmv\b|\bcp\b|\bsed\s+-i", command
    ):
        return "writes to .git internals"
    for pattern, why in _DANGEROUS:
        if pattern.search(command):
            return why
    for segment in re.split(r"&&|\|\||;|\|", command):
        try:
            tokens = shlex.split(segment)
        except ValueError:
            tokens = segment.split()
        if tokens and tokens[0] in {"rm", "/bin/rm"} and _rm_outside(tokens):
            return "deletes recursively outside the workspace"
    return None
