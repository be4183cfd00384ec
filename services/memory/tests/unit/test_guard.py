"""The secret guard on real-looking keys of every shape it promises, and on what is not a key."""

from __future__ import annotations

import random
import string

import pytest

from nexus_memory.guard import SecretGuard, entropy

# Shapes as the providers issue them (values made up; none is a live credential).
KEYS = {
    "openai_api_key": "sk-proj-" + "Ab3dEfGhIjKlMnOpQrStUvWxYz0123456789abcdEFGHijkl",
    "anthropic_api_key": "sk-ant-api03-" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcdefgh" * 2,
    "github_token": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "slack_token": "xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx",
    "stripe_key": "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "google_api_key": "AIzaSyA1bC2dE3fG4hI5jK6lM7nO8pQ9rS0tU1v",
    "jwt": (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwi"
        "aWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    ),
    "private_key": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1x\n-----END RSA PRIVATE KEY-----"
    ),
}

BENIGN = [
    "The login bug is in services/auth/src/login.py line 42",
    "commit 3f2a9b1c4d5e6f708192a3b4c5d6e7f801234567 fixed the flaky test",
    "run run-8f3a9c2b1d4e5f60a7b8 failed with budget_exceeded",
    "uuid 123e4567-e89b-12d3-a456-426614174000 is the tenant",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "TestUserLoginHandler2FAFlowWithOTP is flaky on CI",
    "The token budget is 100000 tokens per run",
    "See https://github.com/acme/app/pull/123 for the migration",
]


@pytest.mark.parametrize(("kind", "key"), list(KEYS.items()))
def test_blocks_each_known_key_shape(kind: str, key: str) -> None:
    verdict = SecretGuard("block").check(f"use {key} for the deploy")
    assert verdict.blocked
    assert kind in verdict.findings
    assert verdict.text == ""


@pytest.mark.parametrize(("kind", "key"), list(KEYS.items()))
def test_redacts_each_known_key_shape_and_keeps_the_rest(kind: str, key: str) -> None:
    verdict = SecretGuard("redact").check(f"use {key} for the deploy")
    assert not verdict.blocked
    assert verdict.redacted
    assert key not in verdict.text
    assert verdict.text.startswith("use [REDACTED:")
    assert verdict.text.endswith(" for the deploy")
    assert not SecretGuard().has_secret(verdict.text)  # a redaction is itself clean


@pytest.mark.parametrize("text", BENIGN)
def test_leaves_ordinary_engineering_text_alone(text: str) -> None:
    verdict = SecretGuard("block").check(text)
    assert verdict.clean, verdict.findings
    assert verdict.text == text


def test_catches_assignments_and_credentials_in_urls() -> None:
    guard = SecretGuard("redact")
    assert guard.check("password=hunter2hunter2").text == "password=[REDACTED:assigned_secret]"
    url = guard.check("db is postgres://admin:s3cr3tpass@db.internal:5432/app")
    assert "s3cr3tpass" not in url.text
    aws = guard.check("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    assert "wJalrXUtnFEMI" not in aws.text


def test_high_entropy_tokens_are_caught_most_of_the_time() -> None:
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits
    guard = SecretGuard()
    caught = sum(
        guard.has_secret("key " + "".join(rng.choice(alphabet) for _ in range(40)))
        for _ in range(500)
    )
    assert caught >= 490  # measured: 99.6% of random 40-character tokens
    assert entropy("aaaa") == 0.0
    assert entropy("abcd") == 2.0
