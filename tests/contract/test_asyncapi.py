"""docs/asyncapi.json is the current AsyncAPI 3.0.0 document of the contract, and it holds
together: every reference resolves, every event and query is in it, and its payload schemas
accept what the codec really sends."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from nexus_events.contract import asyncapi, codec, roles, subjects
from nexus_events.contract.subjects import Family
from nexus_events.events import DeadLetter, RunCompleted, RunRequested, RunResult, registered
from nexus_events.events import base as events_base
from nexus_events.events.base import Event

ROOT = Path(__file__).resolve().parents[2]
DOC_PATH = ROOT / asyncapi.DEFAULT_PATH


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return asyncapi.build_document()


def _pointer(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), f"only local references are expected, got {ref!r}"
    node: Any = document
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict), f"{ref}: {part!r} is under a non-object"
        assert part in node, f"{ref} does not resolve ({part!r} missing)"
        node = node[part]
    return node


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


# --- staleness -----------------------------------------------------------------------------


def test_committed_document_is_current() -> None:
    assert DOC_PATH.exists(), f"{DOC_PATH} is missing; run `{asyncapi.REGENERATE}`"
    committed = DOC_PATH.read_text(encoding="utf-8")
    current = asyncapi.dumps(asyncapi.build_document())
    if committed != current:
        old = json.loads(committed)
        new = json.loads(current)
        sections = {name: (old.get(name, {}), new[name]) for name in ("channels", "operations")} | {
            f"components/{name}": (old.get("components", {}).get(name, {}), section)
            for name, section in new["components"].items()
        }
        changed = sorted(
            f"{name}/{key}"
            for name, (was, now) in sections.items()
            for key in was.keys() | now.keys()
            if was.get(key) != now.get(key)
        )
        pytest.fail(
            f"{asyncapi.DEFAULT_PATH} is stale (the contract changed); run "
            f"`{asyncapi.REGENERATE}` and commit it. Changed: {', '.join(changed) or 'header'}"
        )


def test_check_mode_reports_a_stale_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "asyncapi.json"
    assert asyncapi.main(["--check", "--path", str(path)]) == 1  # missing
    assert asyncapi.main(["--write", "--path", str(path)]) == 0
    assert asyncapi.main(["--check", "--path", str(path)]) == 0
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert text.startswith('{\n  "asyncapi": "3.0.0",')  # 2-space indent, sorted keys
    path.write_text(text.replace('"version": "v1"', '"version": "v0"'), encoding="utf-8")
    capsys.readouterr()
    assert asyncapi.main(["--check", "--path", str(path)]) == 1
    assert "make asyncapi" in capsys.readouterr().err


def test_generation_is_deterministic() -> None:
    assert asyncapi.dumps(asyncapi.build_document()) == asyncapi.dumps(asyncapi.build_document())


def test_an_event_without_roles_fails_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    class Unplanned(Event):
        event_family: ClassVar[Family] = Family.RUN
        event_name: ClassVar[str] = "zz_unplanned"

    monkeypatch.setitem(events_base._REGISTRY, (Family.RUN, "zz_unplanned"), Unplanned)
    with pytest.raises(ValueError, match=r"no roles for \['run\.zz_unplanned'\]"):
        asyncapi.build_document()


def test_a_query_without_models_fails_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = "nexus.core.v1.zz.get"
    monkeypatch.setattr(subjects, "QUERY_SUBJECTS", (*subjects.QUERY_SUBJECTS, extra))
    monkeypatch.setitem(roles.QUERY_ROLES, extra, roles.QueryRoles(roles.Party(roles.CORE), ()))
    with pytest.raises(
        ValueError, match=r"no request/reply models for \['nexus\.core\.v1\.zz\.get'\]"
    ):
        asyncapi.build_document()


# --- structure -------------------------------------------------------------------------------


def test_version_and_top_level(doc: dict[str, Any]) -> None:
    assert doc["asyncapi"] == "3.0.0"
    assert {"info", "channels", "operations", "components"} <= doc.keys()
    assert doc["info"]["title"]
    assert doc["info"]["version"]
    # AsyncAPI 3 component keys: ^[a-zA-Z0-9.\-_]+$
    for section in ("schemas", "messages", "parameters"):
        for key in doc["components"][section]:
            assert re.fullmatch(r"[A-Za-z0-9.\-_]+", key), f"components/{section}/{key}"
    for key in (*doc["channels"], *doc["operations"]):
        assert re.fullmatch(r"[A-Za-z0-9.\-_]+", key), key


def test_every_reference_resolves(doc: dict[str, Any]) -> None:
    refs = set(_refs(doc))
    assert refs, "the document should use references"
    for ref in refs:
        _pointer(doc, ref)


def test_operations_use_their_own_channel_messages(doc: dict[str, Any]) -> None:
    for op_id, op in doc["operations"].items():
        assert op["action"] in ("send", "receive"), op_id
        channel_ref = op["channel"]["$ref"]
        _pointer(doc, channel_ref)
        assert op["messages"], op_id
        for message in op["messages"]:
            # AsyncAPI 3: an operation's messages are messages of its channel.
            assert message["$ref"].startswith(channel_ref + "/messages/"), (op_id, message)
        if "reply" in op:
            reply_ref = op["reply"]["channel"]["$ref"]
            for message in op["reply"]["messages"]:
                assert message["$ref"].startswith(reply_ref + "/messages/"), (op_id, message)
        assert op["x-nexus-service"] in {t["name"] for t in doc["info"]["tags"]}
        assert op["tags"] == [{"name": op["x-nexus-service"]}]


def test_addresses_parameters_match(doc: dict[str, Any]) -> None:
    for cid, channel in doc["channels"].items():
        address = channel["address"]
        if address is None:  # a reply channel: the requester's _INBOX subject
            assert cid.endswith(".reply")
            continue
        names = set(re.findall(r"\{([^}]+)\}", address))
        assert names == set(channel.get("parameters", {})), cid


def test_every_registered_event_is_a_message_on_its_subject(doc: dict[str, Any]) -> None:
    operations = doc["operations"].values()
    for (family, name), model in registered().items():
        message = doc["components"]["messages"][model.__name__]
        assert message["x-nexus-schema"] == model.schema_name()
        assert _pointer(doc, message["payload"]["$ref"])["title"] == model.__name__
        cid = asyncapi.event_channel_id(family, name)
        channel = doc["channels"][cid]
        assert channel["x-nexus-stream"]
        assert channel["messages"][model.__name__]["$ref"].endswith(model.__name__)
        # The address, with its parameters filled in, is a subject of the event's family.
        concrete = re.sub(r"\{[^}]+\}", "x1", channel["address"])
        parsed = subjects.parse_subject(concrete)
        assert parsed.family is family
        if subjects.has_event_token(family):
            assert concrete.endswith("." + name.rsplit(".", 1)[-1])
        ref = f"#/channels/{cid}/messages/{model.__name__}"
        for action in ("send", "receive"):
            assert any(
                op["action"] == action and ref in [m["$ref"] for m in op["messages"]]
                for op in operations
            ), f"nobody {action}s {model.schema_name()}"


def test_every_query_has_request_reply_operations(doc: dict[str, Any]) -> None:
    by_address = {c["address"]: cid for cid, c in doc["channels"].items()}
    for subject in subjects.QUERY_SUBJECTS:
        # A per-run request's wildcard is written as its run id parameter (a warm pod's: slot).
        parameter = "{slot}" if subject == subjects.RUNNER_WARM else "{run_id}"
        cid = by_address[subject.replace("*", parameter)]
        ops = [
            op for op in doc["operations"].values() if op["channel"]["$ref"] == f"#/channels/{cid}"
        ]
        assert {op["action"] for op in ops} == {"send", "receive"}, subject
        assert all("reply" in op for op in ops), subject
        servers = [op for op in ops if op["action"] == "receive"]
        assert len(servers) == 1, f"{subject} is answered by exactly one service"


def test_dead_letter_channel(doc: dict[str, Any]) -> None:
    channel = doc["channels"]["dlq"]
    assert channel["address"] == "nexus.dlq.v1.{service}"
    assert channel["x-nexus-stream"] == "NEXUS_DLQ"
    senders = {
        op["x-nexus-service"]
        for op in doc["operations"].values()
        if op["channel"]["$ref"] == "#/channels/dlq" and op["action"] == "send"
    }
    assert {"core", "scheduler", "runner"} <= senders


def test_schemas_are_valid_json_schema(doc: dict[str, Any]) -> None:
    for name, schema in doc["components"]["schemas"].items():
        try:
            Draft202012Validator.check_schema(schema)
        except Exception as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"components/schemas/{name}: {exc}")


# --- the schemas describe the real wire format ------------------------------------------------


def _validator(doc: dict[str, Any], ref: str) -> Draft202012Validator:
    # The document's components as the root, so its "#/components/..." references resolve.
    return Draft202012Validator({"components": doc["components"], "$ref": ref})


def _wire(subject: str, event: Event) -> tuple[dict[str, Any], dict[str, str]]:
    out = codec.encode(subject, event, source="test")
    return json.loads(out.body), dict(out.headers)


@pytest.mark.parametrize(
    ("subject", "event"),
    [
        (subjects.run_event("r1", "requested"), RunRequested(agent_id="a1", input="fix it")),
        (
            subjects.run_event("r1", "completed"),
            RunCompleted(result=RunResult(summary="done"), tokens_in=1, tokens_out=2),
        ),
        (
            subjects.dead_letter("core"),
            DeadLetter(
                service="core",
                subject="nexus.task.v1.t1.created",
                body="{}",
                reason="invalid_event",
                error="title: missing",
                num_delivered=1,
            ),
        ),
    ],
)
def test_encoded_events_match_their_message(
    doc: dict[str, Any], subject: str, event: Event
) -> None:
    body, headers = _wire(subject, event)
    message = doc["components"]["messages"][type(event).__name__]
    _validator(doc, message["payload"]["$ref"]).validate(body)
    headers_schema = {"components": doc["components"], **message["headers"]}
    Draft202012Validator(headers_schema).validate(headers)
    assert headers[codec.SCHEMA] == message["x-nexus-schema"]


def test_payload_schema_rejects_a_wrong_body(doc: dict[str, Any]) -> None:
    message = doc["components"]["messages"]["RunRequested"]
    with pytest.raises(ValidationError):
        _validator(doc, message["payload"]["$ref"]).validate({"input": 3})
