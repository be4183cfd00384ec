"""The secret guard: no credential enters memory (docs/design.md §10.4).

Every write path (a record request, an extraction's output, a consolidation's output, and a
`recorded` event someone published by hand) passes `SecretGuard.check`. Known key shapes come
from detect-secrets' maintained detectors (AWS, GitHub, GitLab, Slack, Stripe, OpenAI, JWT,
npm, PyPI, SendGrid, Twilio, Discord, Telegram, Azure, Mailchimp, Artifactory, basic auth in
URLs); we use their patterns directly to get each match's span, because their scan reports
only a group of the match (``ghp`` for a whole GitHub token). What they lack is added here:
Anthropic and Google keys, whole PEM private-key blocks, ``password=...`` style assignments
and high-entropy tokens (mixed-case letters and digits, 24+ characters, over 4 bits/char).

Pure and synchronous: a few regex passes over a text of at most a few KB.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

Policy = Literal["block", "redact"]

# detect-secrets' regex detectors, named as our findings are.
_LIBRARY = {
    "aws_access_key": AWSKeyDetector,
    "github_token": GitHubTokenDetector,
    "gitlab_token": GitLabTokenDetector,
    "slack_token": SlackDetector,
    "stripe_key": StripeDetector,
    "openai_api_key": OpenAIDetector,
    "jwt": JwtTokenDetector,
    "npm_token": NpmDetector,
    "pypi_token": PypiTokenDetector,
    "sendgrid_key": SendGridDetector,
    "twilio_key": TwilioKeyDetector,
    "discord_token": DiscordBotTokenDetector,
    "telegram_bot_token": TelegramBotTokenDetector,
    "azure_storage_key": AzureStorageKeyDetector,
    "mailchimp_key": MailchimpDetector,
    "artifactory_token": ArtifactoryDetector,
    "basic_auth": BasicAuthDetector,
}

_OWN: dict[str, re.Pattern[str]] = {
    "private_key": re.compile(
        r"-----BEGIN[A-Z ]*PRIVATE KEY( BLOCK)?-----.*?"
        r"(?:-----END[A-Z ]*PRIVATE KEY( BLOCK)?-----|\Z)",
        re.DOTALL,
    ),
    "anthropic_api_key": re.compile(r"\bsk-ant-[A-Za-z0-9]{2,8}-[A-Za-z0-9_-]{20,}"),
    # Project, service-account and admin keys; detect-secrets only knows the T3BlbkFJ shape.
    "openai_api_key": re.compile(r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}"),
    "google_api_key": re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),
    "google_oauth_secret": re.compile(r"\bGOCSPX-[A-Za-z0-9_-]{20,}"),
    "aws_secret_key": re.compile(
        r"(?i)aws.{0,20}?(?:secret|private).{0,20}?['\"=:\s]([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
    ),
    "assigned_secret": re.compile(
        r"(?i)\b(?:api[_-]?key|secret(?:[_-]?key)?|access[_-]?token|auth[_-]?token|token|"
        r"passw(?:or)?d|pwd|client[_-]?secret)\b\s*[:=]\s*['\"]?(?!\[REDACTED)([^\s'\",;]{8,})"
    ),
}

# Own patterns whose group 1 is the secret (the value after `password=`), not the whole match.
_VALUE_GROUP = frozenset({"aws_secret_key", "assigned_secret"})
_TOKEN = re.compile(r"[A-Za-z0-9+/=_-]{24,}")
_MIN_ENTROPY = 4.0


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the guard decided: `text` is what may be stored (redacted under that policy);
    `blocked` means nothing may be stored."""

    text: str
    findings: tuple[str, ...]
    blocked: bool

    @property
    def clean(self) -> bool:
        return not self.findings

    @property
    def redacted(self) -> bool:
        return bool(self.findings) and not self.blocked

    def reason(self) -> str:
        return "secret detected: " + ", ".join(self.findings)


def entropy(token: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(token)
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _high_entropy(token: str) -> bool:
    # Two digits at least: long CamelCase identifiers (TestLogin2FAFlow...) mix cases and
    # reach 4 bits/char too, but rarely hold more than one digit; random keys usually do.
    mixed = (
        any(c.islower() for c in token)
        and any(c.isupper() for c in token)
        and sum(c.isdigit() for c in token) >= 2
    )
    # Paths mix cases and digits too, with less randomness per character than a key.
    threshold = _MIN_ENTROPY + (0.5 if "/" in token else 0.0)
    return mixed and entropy(token) >= threshold


def _library_patterns() -> list[tuple[str, re.Pattern[str]]]:
    out: list[tuple[str, re.Pattern[str]]] = []
    for kind, detector in _LIBRARY.items():
        out.extend((kind, pattern) for pattern in detector().denylist)  # type: ignore[abstract]
    return out


class SecretGuard:
    """Finds secrets in a text and applies the policy (block, or redact each match)."""

    def __init__(self, policy: Policy = "block") -> None:
        self.policy: Policy = policy
        self._patterns = [*_library_patterns(), *_OWN.items()]
        self._jwt = JwtTokenDetector()

    def scan(self, text: str) -> list[Finding]:
        """Every secret-looking span of `text`, merged where they overlap, in order."""
        spans = list(self._matches(text))
        spans.sort(key=lambda f: (f.start, -f.end))
        merged: list[Finding] = []
        for f in spans:
            if merged and f.start <= merged[-1].end:
                last = merged[-1]
                if f.end > last.end:
                    merged[-1] = Finding(last.kind, last.start, f.end)
                continue
            merged.append(f)
        return merged

    def _matches(self, text: str) -> Iterator[Finding]:
        for kind, pattern in self._patterns:
            for m in pattern.finditer(text):
                start, end = m.span(1) if kind in _VALUE_GROUP else m.span()
                if end <= start:
                    continue
                if kind == "jwt" and not self._jwt.is_formally_valid(m.group(0)):
                    continue
                yield Finding(kind, start, end)
        for m in _TOKEN.finditer(text):
            if _high_entropy(m.group(0)):
                yield Finding("high_entropy_token", m.start(), m.end())

    def check(self, text: str) -> Verdict:
        findings = self.scan(text)
        kinds = tuple(dict.fromkeys(f.kind for f in findings))
        if not findings:
            return Verdict(text, (), blocked=False)
        if self.policy == "block":
            return Verdict("", kinds, blocked=True)
        out: list[str] = []
        last = 0
        for f in findings:
            out.append(text[last : f.start])
            out.append(f"[REDACTED:{f.kind}]")
            last = f.end
        out.append(text[last:])
        return Verdict("".join(out), kinds, blocked=False)

    def has_secret(self, text: str) -> bool:
        return bool(self.scan(text))
