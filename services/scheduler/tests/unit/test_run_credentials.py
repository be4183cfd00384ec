"""Run tokens (mint, verify), the permissions of a run's credential, and the callout's JWTs."""

from __future__ import annotations

import base64
import json
from typing import Any

import nkeys  # type: ignore[import-untyped]
import pytest
from nexus_events.contract import run_access, subjects
from nexus_events.contract.roles import EVENT_ROLES, Service
from nexus_events.contract.run_access import RUNNER_EVENTS
from nexus_events.contract.subjects import Family
from nexus_events.events.runs import RunConfig
from nexus_scheduler.auth_callout import decide
from nexus_scheduler.callout_jwt import AuthRequest, CalloutError, Issuer, read_request
from nexus_scheduler.run_credentials import (
    EXPIRY_MARGIN_SECONDS,
    CredentialRefusedError,
    RunCredential,
    RunCredentialMinter,
    grants_of,
    mint,
    token_key,
    verify,
)

SEED = Issuer.generate()
KEY = token_key(SEED.encode())
NOW = 1_800_000_000


def _cred(**changes: Any) -> RunCredential:
    base: dict[str, Any] = {
        "run_id": "run-a",
        "attempt": 2,
        "grants": frozenset({"delegate"}),
        "expires": NOW + 60,
    }
    return RunCredential(**(base | changes))


def test_a_minted_token_verifies_as_what_it_was_minted_for() -> None:
    user, password = mint(KEY, _cred())
    assert user == "run:run-a"
    assert verify(KEY, user, password, now=NOW) == _cred()


@pytest.mark.parametrize(
    ("user", "password", "why"),
    [
        ("run:run-b", None, "signature does not match"),  # run A's token as run B
        ("core", None, "not a run user"),
        ("run:a.b", None, "invalid run id"),
        ("run:run-a", "v1.2.0.none", "malformed"),
        ("run:run-a", "v0.2.9.none.x", "malformed"),
    ],
)
def test_a_token_for_another_user_or_malformed_is_refused(
    user: str, password: str | None, why: str
) -> None:
    _, genuine = mint(KEY, _cred())
    with pytest.raises(CredentialRefusedError, match=why):
        verify(KEY, user, password or genuine, now=NOW)


def test_a_forged_or_expired_token_is_refused() -> None:
    user, password = mint(KEY, _cred())
    parts = password.split(".")
    for forged in (
        ".".join([parts[0], "3", *parts[2:]]),  # another attempt
        ".".join([*parts[:2], str(NOW + 10**6), *parts[3:]]),  # a later expiry
        ".".join([*parts[:3], "delegate+remember", parts[4]]),  # more grants
        mint(token_key(b"another seed"), _cred())[1],  # signed with another key
    ):
        with pytest.raises(CredentialRefusedError, match="signature"):
            verify(KEY, user, forged, now=NOW)
    with pytest.raises(CredentialRefusedError, match="expired"):
        verify(KEY, user, password, now=NOW + 60)


def test_minting_refuses_an_unknown_grant_or_a_bad_run_id() -> None:
    with pytest.raises(ValueError, match="unknown grants"):
        mint(KEY, _cred(grants=frozenset({"admin"})))
    with pytest.raises(ValueError, match="run id"):
        mint(KEY, _cred(run_id="a.>"))


def _config(**extra: Any) -> RunConfig:
    body = {
        "run_id": "run-a",
        "agent_id": "implementer",
        "system_prompt": "s",
        "input": "i",
        "model": {"name": "m"},
        "tools": ["read_file", "remember", "finish"],
        "attempt": 3,
    }
    return RunConfig.model_validate(body | extra)


def test_the_runner_env_carries_the_run_s_credential_and_no_other() -> None:
    minter = RunCredentialMinter(SEED.encode(), min_ttl=600)
    env = minter.runner_nats_env(_config(), NOW)
    assert env["NEXUS_NATS_USER"] == "run:run-a"
    assert env["NEXUS_NATS_INBOX_PREFIX"] == "_INBOX_run-a"
    assert env["NEXUS_NATS_TOKEN"] == env["NEXUS_NATS_CREDS_FILE"] == ""
    cred = verify(KEY, "run:run-a", env["NEXUS_NATS_PASSWORD"], now=NOW)
    assert (cred.attempt, cred.grants) == (3, frozenset({"remember"}))
    # The run's wall budget (3600 s by default) plus the margin outlasts the minimum here.
    assert cred.expires == NOW + 3600 + EXPIRY_MARGIN_SECONDS
    assert grants_of(_config(tools=["delegate", "remember"])) == {"delegate", "remember"}


def test_a_run_may_publish_only_its_own_events_and_what_it_was_granted() -> None:
    perms = run_access.run_permissions("run-a", 1, frozenset())
    pub = set(perms.publish)
    assert subjects.run_event("run-a", "completed") in pub
    assert subjects.run_log("run-a") in pub
    assert subjects.run_transcript("run-a") in pub
    for decided in ("requested", "prepared", "queued", "dispatched", "resuming", "lost"):
        assert subjects.run_event("run-a", decided) not in pub
    assert not any("run-b" in p for p in pub)
    assert subjects.inbox("run-a") not in pub  # it cannot answer its own approval
    assert not any(p.startswith("agent.inbox") for p in pub)
    assert subjects.family_filter(subjects.Family.ROUTE) not in pub
    assert subjects.MEMORY_RECORD not in pub
    granted = set(
        run_access.run_permissions("run-a", 1, frozenset({"delegate", "remember"})).publish
    )
    assert granted - pub == {subjects.family_filter(subjects.Family.ROUTE), subjects.MEMORY_RECORD}
    # Any schedule_* tool: its own run's agent-schedules subject, never another run's.
    assert subjects.agent_schedules("run-a") not in pub
    for tool in run_access.SCHEDULE_TOOLS:
        scheduling = set(run_access.run_permissions("run-a", 1, frozenset({tool})).publish)
        assert scheduling - pub == {subjects.agent_schedules("run-a")}
    # Consumers only by name and on its own subjects; replies on its own prefix.
    creates = [p for p in pub if p.startswith("$JS.API.CONSUMER.CREATE.")]
    assert len(creates) == len(run_access.run_consumers("run-a", 1))
    assert all(".run-a_a1_" in p and "run-a" in p.split(".", 6)[-1].split(".") for p in creates)
    assert "$JS.API.CONSUMER.CREATE.NEXUS_INBOX" not in pub
    # Checkpoints: its own chunk subjects; no object store meta, purge or read by sequence.
    assert "$O.nexus_checkpoints.C.run-a.>" in pub
    assert not any(p.startswith(("$O.nexus_checkpoints.M", "$O.nexus_checkpoints.>")) for p in pub)
    assert not any(".PURGE." in p or ".MSG.GET." in p or "DIRECT.GET" in p for p in pub)
    assert perms.subscribe == ("_INBOX_run-a.>",)
    with pytest.raises(ValueError, match="unknown grants"):
        run_access.run_permissions("run-a", 1, frozenset({"everything"}))


def _claims(jwt: str) -> dict[str, Any]:
    head, body, sig = jwt.split(".")
    assert json.loads(base64.urlsafe_b64decode(head + "==")) == {
        "typ": "JWT",
        "alg": "ed25519-nkey",
    }
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    signer = nkeys.from_seed(SEED.encode())
    assert signer.verify(f"{head}.{body}".encode(), base64.urlsafe_b64decode(sig + "=="))
    return claims


def _request(user: str, password: str) -> bytes:
    nats = {
        "server_id": {"name": "n", "host": "h", "id": "NSERVER"},
        "user_nkey": "UUSER",
        "client_info": {},
        "connect_opts": {"user": user, "pass": password, "protocol": 1},
        "type": "authorization_request",
        "version": 2,
    }
    body = base64.urlsafe_b64encode(json.dumps({"nats": nats}).encode()).decode()
    return f"e30.{body}.c2ln".encode()


def test_the_callout_answers_a_valid_token_with_the_run_s_user_jwt() -> None:
    issuer = Issuer(SEED)
    user, password = mint(KEY, _cred())
    request = read_request(_request(user, password))
    assert request == AuthRequest(
        server_id="NSERVER", user_nkey="UUSER", user=user, password=password
    )
    jwt, error = decide(issuer, KEY, request, NOW)
    assert error == ""
    claims = _claims(jwt)
    assert claims["sub"] == "UUSER"
    assert claims["iss"] == issuer.public_key
    assert claims["aud"] == "$G"
    assert claims["exp"] == NOW + 60
    perms = run_access.run_permissions("run-a", 2, frozenset({"delegate"}))
    assert claims["nats"]["pub"]["allow"] == list(perms.publish)
    assert claims["nats"]["sub"]["allow"] == list(perms.subscribe)
    response = _claims(issuer.response(request, jwt=jwt, now=NOW))
    assert (response["sub"], response["aud"]) == ("UUSER", "NSERVER")
    assert response["nats"] == {"type": "authorization_response", "version": 2, "jwt": jwt}


def test_the_callout_refuses_with_a_reason_and_rejects_what_is_not_a_request() -> None:
    request = read_request(_request("run:run-b", mint(KEY, _cred())[1]))
    jwt, error = decide(Issuer(SEED), KEY, request, NOW)
    assert jwt == ""
    assert "signature does not match" in error
    answer = _claims(Issuer(SEED).response(request, error=error, now=NOW))
    assert answer["nats"]["error"] == error
    assert "jwt" not in answer["nats"]
    for bad in (b"not a jwt", b"a.!!!.c", _request("u", "p").replace(b"e30.", b"e30.x")):
        with pytest.raises(CalloutError):
            read_request(bad)


def test_an_issuer_needs_an_account_seed() -> None:
    with pytest.raises(CalloutError, match="not an nkey seed"):
        Issuer("SAnonsense")
    user_seed = nkeys.encode_seed(b"\x01" * 32, nkeys.PREFIX_BYTE_USER).decode()
    with pytest.raises(CalloutError, match="account seed"):
        Issuer(user_seed)


def test_a_run_may_publish_every_run_event_the_contract_gives_the_runner() -> None:
    """A run event the contract says the runner publishes, missing from its credential, would
    have the server refuse it and the runner die waiting for the ack (as `egress` and
    `mcp_server_unavailable` did when they were added beside the credential)."""
    runner = Service.RUNNER
    published = {
        name
        for (family, name), roles in EVENT_ROLES.items()
        if family is Family.RUN and any(p.service is runner for p in roles.publishers)
    }
    assert published == {str(e) for e in RUNNER_EVENTS}


def test_a_lab_run_s_token_carries_its_source_under_the_mac() -> None:
    lab = _cred(source_run_id="run-src")
    user, password = mint(KEY, lab)
    assert password.count(".") == 5  # one part more than a plain token's
    assert verify(KEY, user, password, now=NOW) == lab
    parts = password.split(".")
    for forged in (
        ".".join([*parts[:4], "run-other", parts[5]]),  # another source
        ".".join([*parts[:4], parts[5]]),  # the source dropped
    ):
        with pytest.raises(CredentialRefusedError, match="signature"):
            verify(KEY, user, forged, now=NOW)
    # A plain token stays valid and names no source.
    _, plain = mint(KEY, _cred())
    assert verify(KEY, user, plain, now=NOW).source_run_id is None
    with pytest.raises(ValueError, match="source run id"):
        mint(KEY, _cred(source_run_id="a.>"))


def test_a_lab_run_s_env_and_jwt_allow_its_source_s_consumers() -> None:
    lab = {"mode": "replay", "source_run_id": "run-src"}
    env = RunCredentialMinter(SEED.encode(), min_ttl=600).runner_nats_env(_config(lab=lab), NOW)
    cred = verify(KEY, "run:run-a", env["NEXUS_NATS_PASSWORD"], now=NOW)
    assert cred.source_run_id == "run-src"
    _, password = mint(KEY, _cred(source_run_id="run-src"))
    jwt, error = decide(Issuer(SEED), KEY, read_request(_request("run:run-a", password)), NOW)
    assert error == ""
    allowed = _claims(jwt)["nats"]["pub"]["allow"]
    perms = run_access.run_permissions("run-a", 2, frozenset({"delegate"}), "run-src")
    assert allowed == list(perms.publish)
    source = run_access.source_transcript_replay("run-a", 2, "run-src")
    assert f"$JS.API.CONSUMER.CREATE.{source.stream}.{source.name}.{source.filter}" in allowed
    # Nothing of the source is writable.
    assert not [s for s in allowed if "run-src" in s and not s.startswith("$JS.API.CONSUMER")]
