"""Generic signed webhooks, one source per YAML entry: how to verify it (HMAC-SHA256,
HMAC-SHA1, a shared token, or Standard Webhooks), its replay window, where its delivery id
and event kind are, published as `WebhookReceived` on ``nexus.channel.v1.<source>.webhook``.

    sources:
      - name: github
        scheme: hmac-sha256
        secret_env: GITHUB_WEBHOOK_SECRET
        signature_header: X-Hub-Signature-256
        signature_prefix: "sha256="
        delivery_header: X-GitHub-Delivery
        kind_header: X-GitHub-Event
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from nexus_events.contract import subjects
from nexus_events.contract.subjects import TOKEN_PATTERN
from nexus_events.events import WebhookReceived
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from nexus_channel_gateway.inbound import Accepted, Refused, Verdict, key_token

Scheme = Literal["hmac-sha256", "hmac-sha1", "token", "standard-webhooks"]
_DIGESTS = {"hmac-sha256": hashlib.sha256, "hmac-sha1": hashlib.sha1}


class WebhookSource(BaseModel):
    """One configured source (extra keys are errors: a typo must not weaken verification)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., description="Source name: URL path /hooks/<name> and channel token.")
    scheme: Scheme = Field(..., description="How requests are verified.")
    secret: SecretStr | None = Field(None, description="The shared secret (prefer secret_env).")
    secret_env: str | None = Field(None, description="Environment variable holding the secret.")
    signature_header: str = Field(
        "X-Signature", description="Header with the signature or token (not standard-webhooks)."
    )
    signature_prefix: str = Field("", description="Prefix before the hex digest (sha256=).")
    timestamp_header: str | None = Field(None, description="Header with a unix timestamp.")
    tolerance: int = Field(300, gt=0, description="Seconds a timestamp stays valid.")
    delivery_header: str | None = Field(
        None, description="Header with the delivery id (dedupe); default: a hash of the body."
    )
    kind_header: str | None = Field(None, description="Header naming the event kind.")
    kind_path: str | None = Field(None, description="Dotted JSON path of the event kind.")

    @field_validator("name")
    @classmethod
    def _token(cls, value: str) -> str:
        if TOKEN_PATTERN.fullmatch(value) is None or value in ("slack", "telegram"):
            raise ValueError(f"source name {value!r}: [A-Za-z0-9_-], not slack or telegram")
        return value

    @model_validator(mode="after")
    def _has_secret(self) -> WebhookSource:
        if self.secret is None and self.secret_env is None:
            raise ValueError(f"source {self.name}: set secret or secret_env")
        return self

    def secret_value(self, env: Mapping[str, str]) -> str:
        if self.secret is not None:
            return self.secret.get_secret_value()
        assert self.secret_env is not None
        value = env.get(self.secret_env)
        if not value:
            raise ValueError(f"source {self.name}: environment variable {self.secret_env} unset")
        return value


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sources: list[WebhookSource] = Field(default_factory=list)


def load_sources(path: Path) -> list[WebhookSource]:
    """Read and validate the YAML file; raises ValueError with the offending field."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    sources = _File.model_validate(data).sources
    names = [s.name for s in sources]
    if len(names) != len(set(names)):
        raise ValueError(f"{path}: duplicate source names")
    return sources


def delivery_key(source: str, delivery: str) -> str:
    """The dedupe key (and Nats-Msg-Id) of one delivery of a source: any delivery id the
    sender chose becomes a safe token."""
    return key_token("hook", source, hashlib.blake2b(delivery.encode(), digest_size=12).hexdigest())


def _dig(payload: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(payload, dict):
            return None
        payload = payload.get(part)
    return payload


class WebhookIngress:
    """Verifies and turns requests of one source into `Accepted` verdicts."""

    def __init__(
        self,
        source: WebhookSource,
        env: Mapping[str, str] | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self._secret = source.secret_value(os.environ if env is None else env)
        self._now = now

    def _fresh(self, stamp: str | None) -> Refused | None:
        if stamp is None:
            return Refused(401, "missing timestamp", "forged")
        try:
            ts = int(stamp)
        except ValueError:
            return Refused(400, "timestamp is not a number", "malformed")
        if abs(self._now() - ts) > self.source.tolerance:
            return Refused(401, f"timestamp outside the {self.source.tolerance} s window", "stale")
        return None

    def _verify(self, body: bytes, headers: Mapping[str, str]) -> Refused | None:
        s = self.source
        if s.scheme == "standard-webhooks":
            return self._verify_standard(body, headers)
        if s.timestamp_header is not None:
            refused = self._fresh(headers.get(s.timestamp_header))
            if refused is not None:
                return refused
        given = headers.get(s.signature_header)
        if not given:
            return Refused(401, f"missing {s.signature_header}", "forged")
        if s.scheme == "token":
            expected = self._secret
        else:
            mac = hmac.new(self._secret.encode(), body, _DIGESTS[s.scheme]).hexdigest()
            expected = s.signature_prefix + mac
        if not hmac.compare_digest(given.encode(), expected.encode()):
            return Refused(401, "invalid signature", "forged")
        return None

    def _verify_standard(self, body: bytes, headers: Mapping[str, str]) -> Refused | None:
        """Standard Webhooks: ``v1,<base64 HMAC-SHA256(secret, "{id}.{ts}.{body}")>``, the
        secret given as ``whsec_<base64>``; several space-separated signatures may be sent."""
        msg_id, stamp = headers.get("webhook-id"), headers.get("webhook-timestamp")
        signatures = headers.get("webhook-signature", "")
        if not msg_id or not signatures:
            return Refused(401, "missing webhook-id or webhook-signature", "forged")
        refused = self._fresh(stamp)
        if refused is not None:
            return refused
        key = self._secret.removeprefix("whsec_")
        try:
            secret = base64.b64decode(key)
        except ValueError:
            secret = key.encode()
        signed = f"{msg_id}.{stamp}.".encode() + body
        expected = base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode()
        for candidate in signatures.split():
            version, _, value = candidate.partition(",")
            if version == "v1" and hmac.compare_digest(value.encode(), expected.encode()):
                return None
        return Refused(401, "invalid signature", "forged")

    def handle(self, body: bytes, headers: Mapping[str, str]) -> Verdict:
        refused = self._verify(body, headers)
        if refused is not None:
            return refused
        try:
            payload = json.loads(body) if body else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            return Refused(400, "body is not JSON", "malformed")
        s = self.source
        if s.scheme == "standard-webhooks":
            delivery = headers.get("webhook-id")
        elif s.delivery_header is not None:
            delivery = headers.get(s.delivery_header)
            if not delivery:
                return Refused(400, f"missing {s.delivery_header}", "malformed")
        else:
            delivery = None
        delivery = delivery or hashlib.blake2b(body, digest_size=16).hexdigest()
        kind: Any = headers.get(s.kind_header) if s.kind_header else None
        if kind is None and s.kind_path:
            kind = _dig(payload, s.kind_path)
        event = WebhookReceived(
            source=s.name,
            kind=None if kind is None else str(kind),
            delivery_id=delivery,
            payload=payload,
        )
        key = delivery_key(s.name, delivery)
        return Accepted(s.name, key, subjects.channel_event(s.name, "webhook"), event)
