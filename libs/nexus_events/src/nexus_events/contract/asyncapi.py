"""The AsyncAPI 3.0.0 document of the whole contract, built from the contract's own registry.

Channels come from `subjects` (address templates), streams from `streams`, payloads from the
registered event models (`events.registered()`) and the query models, and operations from the
roles table (`roles`). Nothing is read from a running server and FastStream is not involved, so
the document covers every event, including those no FastStream handler uses yet.

    python -m nexus_events.contract.asyncapi --write   # (make asyncapi) write docs/asyncapi.json
    python -m nexus_events.contract.asyncapi --check   # exit 1 if docs/asyncapi.json is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from nexus_events.contract import codec, subjects
from nexus_events.contract.roles import EVENT_ROLES, QUERY_ROLES, Party, Service
from nexus_events.contract.streams import DAY, STREAM_OF_FAMILY, StreamSettings, stream_configs
from nexus_events.contract.subjects import Family
from nexus_events.events import (
    MemoryConsolidateReply,
    MemoryConsolidateRequest,
    MemoryForgetReply,
    MemoryForgetRequest,
    MemoryListReply,
    MemoryListRequest,
    MemoryRebuildReply,
    MemoryRebuildRequest,
    MemoryRecordReply,
    MemoryRecordRequest,
    MemorySearchReply,
    MemorySearchRequest,
    PairingsReply,
    PairingsRequest,
    PlaneResyncReply,
    PlaneResyncRequest,
    PlaneStatusReply,
    PlaneStatusRequest,
    registered,
)
from nexus_events.events.base import Event
from nexus_events.events.evals import EvalGetRequest, EvalListReply, EvalListRequest, EvalReport
from nexus_events.events.flows import FlowRunView, FlowsGet, FlowsList, FlowsListReply
from nexus_events.events.queries import (
    AgentGet,
    AgentsListReply,
    AgentView,
    BoardGet,
    BoardGetReply,
    CatalogHistory,
    CatalogHistoryReply,
    EmptyQuery,
    FlowDefinitionGet,
    FlowDefinitionsListReply,
    FlowDefinitionView,
    ProjectionRebuild,
    ProjectionRebuildReply,
    ProjectionsStatusReply,
    QueryErrorReply,
    RunsEvents,
    RunsEventsReply,
    RunsGet,
    RunsList,
    RunsListReply,
    RunView,
    SkillGet,
    SkillsListReply,
    SkillView,
    UsageSummary,
    UsageSummaryReply,
)
from nexus_events.events.schedules import AgentScheduleRequest, AgentSchedulesReply
from nexus_events.events.spend import (
    BudgetGet,
    BudgetsList,
    BudgetsReply,
    BudgetView,
    RunsSpend,
    RunsSpendReply,
    SpendAdmit,
    SpendReserve,
    SpendVerdict,
    UsageQuery,
    UsageReport,
)
from nexus_events.events.warm import WarmClaim, WarmHandoff
from nexus_events.runtime.services import SERVICES

ASYNCAPI_VERSION = "3.0.0"
DEFAULT_PATH = Path("docs/asyncapi.json")
REGENERATE = "make asyncapi (uv run --frozen python -m nexus_events.contract.asyncapi --write)"

Json = dict[str, Any]
GIB = 1 << 30

_SCHEMAS = "#/components/schemas/"
HEADERS_SCHEMA = "NexusHeaders"

# What each id token of a subject is (AsyncAPI 3 parameters carry no schema, only text).
_ID_RULE = "A subject token: [A-Za-z0-9_-]{1,128}, no dots or wildcards."
PARAMETERS: dict[str, str] = {
    "run_id": f"Run id. `{subjects.NEW_RUN_TOKEN}` on `requested` asks core to generate one.",
    "task_id": "Task id (from the CLI or Plane).",
    "id": "Agent id or skill name.",
    "agent_id": "Agent the delegation is for.",
    "schedule_id": "Schedule id.",
    "scope": "Memory scope (an agent, a task, ...).",
    "channel": "Chat channel (slack, telegram, webhook, ...).",
    "service": "Service that gave up on the message.",
    "flow_run_id": "Flow run id. `new` on `requested` asks the flows service to generate one.",
    "eval_run_id": "Eval run id. `new` on `requested` asks the lab to generate one.",
    "slot": "A warm runner pod's slot (docs/warm-starts.md, Kubernetes).",
    "budget_key": "The spend service's key: an ask's id (ask events) or a budget id.",
    "key": "plane-sync's key: the Nexus task id (writes) or the Plane work item id (webhooks).",
}

# Request and reply models of every query subject.
_QUERY_MODELS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    subjects.CORE_RUNS_GET: (RunsGet, RunView),
    subjects.CORE_RUNS_LIST: (RunsList, RunsListReply),
    subjects.CORE_RUNS_EVENTS: (RunsEvents, RunsEventsReply),
    subjects.CORE_BOARD_GET: (BoardGet, BoardGetReply),
    subjects.CORE_CATALOG_AGENTS_LIST: (EmptyQuery, AgentsListReply),
    subjects.CORE_CATALOG_AGENTS_GET: (AgentGet, AgentView),
    subjects.CORE_CATALOG_SKILLS_LIST: (EmptyQuery, SkillsListReply),
    subjects.CORE_CATALOG_SKILLS_GET: (SkillGet, SkillView),
    subjects.CORE_PROJECTIONS_STATUS: (EmptyQuery, ProjectionsStatusReply),
    subjects.CORE_PROJECTIONS_REBUILD: (ProjectionRebuild, ProjectionRebuildReply),
    subjects.MEMORY_SEARCH: (MemorySearchRequest, MemorySearchReply),
    subjects.MEMORY_RECORD: (MemoryRecordRequest, MemoryRecordReply),
    subjects.MEMORY_FORGET: (MemoryForgetRequest, MemoryForgetReply),
    subjects.MEMORY_LIST: (MemoryListRequest, MemoryListReply),
    subjects.MEMORY_CONSOLIDATE: (MemoryConsolidateRequest, MemoryConsolidateReply),
    subjects.MEMORY_REBUILD: (MemoryRebuildRequest, MemoryRebuildReply),
    subjects.PLANE_STATUS: (PlaneStatusRequest, PlaneStatusReply),
    subjects.PLANE_RESYNC: (PlaneResyncRequest, PlaneResyncReply),
    subjects.CHANNEL_PAIRINGS: (PairingsRequest, PairingsReply),
    subjects.CORE_CATALOG_FLOWS_LIST: (EmptyQuery, FlowDefinitionsListReply),
    subjects.CORE_CATALOG_FLOWS_GET: (FlowDefinitionGet, FlowDefinitionView),
    subjects.FLOWS_GET: (FlowsGet, FlowRunView),
    subjects.FLOWS_LIST: (FlowsList, FlowsListReply),
    subjects.CORE_CATALOG_HISTORY: (CatalogHistory, CatalogHistoryReply),
    subjects.CORE_USAGE_SUMMARY: (UsageSummary, UsageSummaryReply),
    subjects.LAB_EVALS_GET: (EvalGetRequest, EvalReport),
    subjects.LAB_EVALS_LIST: (EvalListRequest, EvalListReply),
    subjects.SPEND_USAGE: (UsageQuery, UsageReport),
    subjects.SPEND_BUDGETS_LIST: (BudgetsList, BudgetsReply),
    subjects.SPEND_BUDGETS_GET: (BudgetGet, BudgetView),
    subjects.SPEND_RUNS: (RunsSpend, RunsSpendReply),
    subjects.SPEND_RESERVE: (SpendReserve, SpendVerdict),
    subjects.SPEND_ADMIT: (SpendAdmit, SpendVerdict),
    subjects.AGENT_SCHEDULES: (AgentScheduleRequest, AgentSchedulesReply),
    subjects.RUNNER_WARM: (WarmHandoff, WarmClaim),
}
# What the wildcard of a per-id request subject is: a run id, but for the warm pods' slots.
_WILDCARD_PARAMETER = {subjects.RUNNER_WARM: "slot"}

# The parties that are no deployed service; the services' lines are the service table's.
_SERVICE_TEXT: dict[str, str] = {
    Service.CLI: "The `nexus` operator CLI.",
    Service.MCP: "`nexus mcp serve`: the MCP server coding assistants and IDEs drive Nexus"
    " through (NATS users mcp-read and mcp-operate).",
    Service.OPERATOR: "A person with the nats CLI: a bare JSON `nats pub` is a valid command.",
    **{spec.name: spec.summary for spec in SERVICES},
}


def event_channel_id(family: Family, name: str) -> str:
    """Channel id of an event: ``run.completed``; one channel per family without event token."""
    return f"{family.value}.{name}" if subjects.has_event_token(family) else family.value


def query_channel_id(subject: str) -> str:
    """Channel id of a query subject: ``core.runs.get`` for ``nexus.core.v1.runs.get``."""
    tokens = subject.split(".")
    # A per-run request (``nexus.spend.v1.reserve.*``): the wildcard is the run id.
    wildcard = "slot" if subject in _WILDCARD_PARAMETER else "run"
    return ".".join(wildcard if t == "*" else t for t in tokens[1:] if t != "v1")


def build_document() -> Json:
    """The AsyncAPI 3.0.0 document of the whole contract, as plain JSON data.

    Deterministic: the same contract gives the same document. Raises `ValueError` if the
    roles table misses a registered event or query subject, or two models share a name.
    """
    events = registered()
    _check_roles(set(events), set(subjects.QUERY_SUBJECTS))
    schemas = _schemas(events.values())
    channels: Json = {}
    messages: Json = {}
    operations: Json = {}
    used_parameters: set[str] = set()

    for (family, name), model in sorted(events.items()):
        cid = event_channel_id(family, name)
        key = model.__name__
        messages[key] = _event_message(model)
        channel = channels.get(cid)
        if channel is None:
            channel = channels[cid] = _event_channel(family, name)
            used_parameters.update(channel.get("parameters", {}))
        channel["messages"][key] = {"$ref": f"#/components/messages/{key}"}
        roles = EVENT_ROLES[(family, name)]
        for action, parties in (("send", roles.publishers), ("receive", roles.consumers)):
            for party in parties:
                _add_operation(operations, party, action, cid, key)

    for subject in subjects.QUERY_SUBJECTS:
        _add_query(subject, channels, messages, operations)
        if subject in _WILDCARD_PARAMETER:
            used_parameters.add(_WILDCARD_PARAMETER[subject])
    messages["QueryErrorReply"] = {
        "name": "QueryErrorReply",
        "title": "Query error",
        "summary": "Error reply of a query (nats.micro; header Nats-Service-Error-Code).",
        "contentType": "application/json",
        "payload": {"$ref": f"{_SCHEMAS}QueryErrorReply"},
    }

    undescribed = sorted(used_parameters - PARAMETERS.keys())
    if undescribed:
        raise ValueError(f"describe the subject token(s) {undescribed} in asyncapi.PARAMETERS")
    parameters = {
        name: {"description": f"{PARAMETERS[name]} {_ID_RULE}"} for name in sorted(used_parameters)
    }
    document: Json = {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "Nexus event contract",
            "version": "v1",
            "description": "Every subject of Nexus (NATS JetStream + request/reply), its payload"
            " schema and who publishes and consumes it. Generated by"
            " nexus_events.contract.asyncapi from"
            f" the contract; do not edit: {REGENERATE}. See docs/contract.md.",
            "tags": [
                {"name": service.value, "description": _SERVICE_TEXT[service]}
                for service in Service
            ],
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {
                "host": "localhost:4222",
                "protocol": "nats",
                "description": "`nexus dev` and deploy/compose.yaml; each service has its own "
                "NATS user (deploy/nats).",
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": schemas,
            "messages": messages,
            "parameters": parameters,
        },
    }
    # A JSON round trip gives exactly what loading the written file gives (tuples, enums).
    result: Json = json.loads(dumps(document))
    return result


def dumps(document: Json) -> str:
    """The stable file text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


# -- pieces ----------------------------------------------------------------------------


def _check_roles(events: set[tuple[Family, str]], queries: set[str]) -> None:
    missing = sorted(f"{f.value}.{n}" for f, n in events - EVENT_ROLES.keys())
    extra = sorted(f"{f.value}.{n}" for f, n in EVENT_ROLES.keys() - events)
    missing += sorted(queries - QUERY_ROLES.keys())
    extra += sorted(QUERY_ROLES.keys() - queries)
    if missing or extra:
        raise ValueError(
            "nexus_events.contract.roles is out of step with the contract: "
            f"no roles for {missing or 'none'}; roles of unknown {extra or 'none'}"
        )
    unmodelled = sorted(queries - _QUERY_MODELS.keys())
    if unmodelled:
        raise ValueError(f"no request/reply models for {unmodelled} in asyncapi._QUERY_MODELS")


def _schemas(events: Iterable[type[Event]]) -> Json:
    """components/schemas: every contract model and what it nests, one shared namespace."""
    models: list[type[BaseModel]] = sorted(events, key=lambda m: m.__name__)
    models.append(QueryErrorReply)
    for request, reply in _QUERY_MODELS.values():
        models += [request, reply]
    unique = list(dict.fromkeys(models))
    names = [m.__name__ for m in unique]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        # pydantic would rename them with module paths: wire docs must not depend on those.
        raise ValueError(f"two contract models share the name(s) {duplicates}")
    pairs: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "validation") for m in unique]
    _, top = models_json_schema(pairs, ref_template=_SCHEMAS + "{model}")
    schemas: Json = dict(top.get("$defs", {}))
    schemas[HEADERS_SCHEMA] = _headers_schema()
    return dict(sorted(schemas.items()))


def _headers_schema() -> Json:
    def text(description: str) -> Json:
        return {"type": "string", "description": description}

    return {
        "type": "object",
        "title": "Nexus envelope headers",
        "description": "docs/design.md §4.1. All optional: a message published without headers"
        " (`nats pub`) gets defaults from the subject and the JetStream metadata.",
        "properties": {
            codec.MSG_ID: text(
                "Event id; deterministic where a retry could repeat it, so JetStream drops the"
                " duplicate. Default: a hash of subject and body."
            ),
            codec.SCHEMA: text("Schema of the body, e.g. nexus.agent.run.completed/1."),
            codec.SOURCE: text(f"Publishing service; `{codec.UNKNOWN_SOURCE}` when absent."),
            codec.TRACEPARENT: text("W3C trace context: one trace per run across services."),
            codec.TRACESTATE: text("W3C trace state."),
            codec.CORRELATION_ID: text("Ties the messages of one conversation or delegation."),
            codec.CAUSATION_ID: text("Event id of the message that caused this one."),
        },
    }


def _event_message(model: type[Event]) -> Json:
    doc = (model.__doc__ or "").strip()
    message: Json = {
        "name": model.__name__,
        "title": model.schema_name(),
        "contentType": "application/json",
        "headers": {
            "allOf": [
                {"$ref": _SCHEMAS + HEADERS_SCHEMA},
                {
                    "type": "object",
                    "properties": {codec.SCHEMA: {"const": model.schema_name()}},
                },
            ]
        },
        "payload": {"$ref": _SCHEMAS + model.__name__},
        "x-nexus-schema": model.schema_name(),
    }
    # Subclasses without a docstring inherit Event's, which says nothing about this event.
    if doc and "__doc__" in vars(model):
        message["summary"] = doc.splitlines()[0]
    return message


def _event_channel(family: Family, name: str) -> Json:
    address = subjects.address_template(family, name)
    stream = STREAM_OF_FAMILY[family]
    params = [p[1:-1] for p in address.split(".") if p.startswith("{")]
    keyed = "subject's last token" if subjects.has_event_token(family) else "body's `type` field"
    channel: Json = {
        "address": address,
        "title": f"{family.value} {name}" if subjects.has_event_token(family) else family.value,
        "description": f"Stored in {stream} ({_retention(stream)}). The event is named by the"
        f" {keyed}.",
        "messages": {},
        "x-nexus-family": family.value,
        "x-nexus-stream": stream,
    }
    if params:
        channel["parameters"] = {p: {"$ref": f"#/components/parameters/{p}"} for p in params}
    return channel


def _retention(stream: str) -> str:
    # Defaults only: model_construct skips the environment, so the document never depends on
    # the NEXUS_STREAMS_* of whoever generates it (core's settings decide in production).
    config = next(c for c in stream_configs(StreamSettings.model_construct()) if c.name == stream)
    age = f"kept {config.max_age / DAY:g} days" if config.max_age else "kept forever"
    max_bytes = config.max_bytes or -1  # -1: no cap
    size = f", capped at {max_bytes / GIB:g} GiB" if max_bytes > 0 else ""
    return f"by default {age}{size}"


def _add_query(subject: str, channels: Json, messages: Json, operations: Json) -> None:
    cid = query_channel_id(subject)
    reply_cid = f"{cid}.reply"
    parameter = _WILDCARD_PARAMETER.get(subject, "run_id")
    request_model, reply_model = _QUERY_MODELS[subject]
    request_key, reply_key = f"{cid}.request", f"{cid}.reply"
    messages[request_key] = {
        "name": request_key,
        "title": f"{subject} request",
        "summary": (request_model.__doc__ or "").strip().splitlines()[0],
        "contentType": "application/json",
        "payload": {"$ref": _SCHEMAS + request_model.__name__},
    }
    messages[reply_key] = {
        "name": reply_key,
        "title": f"{subject} reply",
        "summary": (reply_model.__doc__ or f"Reply to {subject}.").strip().splitlines()[0],
        "contentType": "application/json",
        "payload": {"$ref": _SCHEMAS + reply_model.__name__},
    }
    channels[cid] = {
        "address": subject.replace("*", "{" + parameter + "}"),
        "title": subject,
        "description": "Request/reply (nats.micro), stored in no stream.",
        "messages": {request_key: {"$ref": f"#/components/messages/{request_key}"}},
    }
    if "*" in subject:
        channels[cid]["parameters"] = {parameter: {"$ref": f"#/components/parameters/{parameter}"}}
    channels[reply_cid] = {
        # The requester's reply subject (_INBOX.<...>): not known in advance.
        "address": None,
        "title": f"{subject} reply",
        "description": "The reply subject the requester gave (an _INBOX subject).",
        "messages": {
            reply_key: {"$ref": f"#/components/messages/{reply_key}"},
            "QueryErrorReply": {"$ref": "#/components/messages/QueryErrorReply"},
        },
    }
    reply = {
        "channel": {"$ref": f"#/channels/{reply_cid}"},
        "messages": [
            {"$ref": f"#/channels/{reply_cid}/messages/{reply_key}"},
            {"$ref": f"#/channels/{reply_cid}/messages/QueryErrorReply"},
        ],
    }
    roles = QUERY_ROLES[subject]
    sides = (("receive", "answers", (roles.server,)), ("send", "asks", roles.clients))
    for action, verb, parties in sides:
        for party in parties:
            operation = _add_operation(operations, party, action, cid, request_key, verb=verb)
            operation["reply"] = reply


def _add_operation(
    operations: Json, party: Party, action: str, cid: str, key: str, *, verb: str | None = None
) -> Json:
    """Add (or extend) the operation of one party on one channel; return it."""
    op_id = f"{party.service.value}.{action}.{cid}" + (".planned" if party.planned else "")
    operation = operations.get(op_id)
    if operation is None:
        verb = verb or ("publishes on" if action == "send" else "consumes")
        operation = operations[op_id] = {
            "action": action,
            "channel": {"$ref": f"#/channels/{cid}"},
            "messages": [],
            "summary": f"{party.service.value} {verb} {cid}"
            + (" (planned: not implemented yet)" if party.planned else ""),
            "tags": [{"name": party.service.value}],
            "x-nexus-service": party.service.value,
        }
        if party.planned:
            operation["x-nexus-planned"] = True
    operation["messages"].append({"$ref": f"#/channels/{cid}/messages/{key}"})
    return operation


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nexus_events.contract.asyncapi", description=__doc__
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the document")
    mode.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    mode.add_argument("--stdout", action="store_true", help="print the document")
    parser.add_argument("--path", type=Path, default=DEFAULT_PATH, help="default: %(default)s")
    args = parser.parse_args(argv)
    text = dumps(build_document())
    if args.stdout:
        sys.stdout.write(text)
        return 0
    current = args.path.read_text(encoding="utf-8") if args.path.exists() else None
    if args.check:
        if current != text:
            print(f"{args.path} is stale; run `{REGENERATE}`", file=sys.stderr)
            return 1
        print(f"{args.path}: up to date")
        return 0
    if current == text:
        print(f"{args.path}: up to date")
    else:
        args.path.parent.mkdir(parents=True, exist_ok=True)
        args.path.write_text(text, encoding="utf-8")
        print(f"{args.path}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
