"""The flows pages: every definition in the catalog, and one flow's graph, its YAML, its
revisions and the diff between two of them."""

from __future__ import annotations

import difflib
from typing import Any

import yaml
from aiohttp import web
from nexus_events.contract import subjects
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events.flows import FlowDefinition
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus_console.catalog_history import catalog_history
from nexus_console.context import console_of
from nexus_console.flowgraph_view import graph_of
from nexus_console.forms import bad_request
from nexus_console.reads import Reads
from nexus_console.rendering import render

routes = web.RouteTableDef()

# Revision numbers core takes (a BIGINT).
MAX_REVISION = 2**63 - 1


class RevisionChoice(BaseModel):
    """The flow page's query string: a revision to show, and two to compare."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    revision: int | None = Field(None, ge=1, le=MAX_REVISION)
    a: int | None = Field(None, ge=1, le=MAX_REVISION)
    b: int | None = Field(None, ge=1, le=MAX_REVISION)


def flow_id_of(request: web.Request) -> str:
    flow_id = request.match_info["flow_id"]
    if subjects.TOKEN_PATTERN.fullmatch(flow_id) is None:
        raise web.HTTPNotFound(text=f"no flow {flow_id!r}")
    return flow_id


def as_yaml(definition: FlowDefinition) -> str:
    """The definition as an operator would write it (defaults left out, steps in order)."""
    document = definition.model_dump(mode="json", exclude_defaults=True)
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)


async def flow_at(reads: Reads, flow_id: str, revision: int | None) -> tuple[int, FlowDefinition]:
    """Core's revision of the flow (the latest without `revision`); 404 when it has none."""
    body: dict[str, Any] = {"id": flow_id}
    if revision is not None:
        body["revision"] = revision
    data = await reads.query(subjects.CORE_CATALOG_FLOWS_GET, body)
    return int(data["revision"]), FlowDefinition.model_validate(data["definition"])


def revision_diff(
    flow_id: str, a: tuple[int, FlowDefinition], b: tuple[int, FlowDefinition]
) -> str:
    lines = difflib.unified_diff(
        as_yaml(a[1]).splitlines(),
        as_yaml(b[1]).splitlines(),
        fromfile=f"{flow_id} revision {a[0]}",
        tofile=f"{flow_id} revision {b[0]}",
        lineterm="",
    )
    return "\n".join(lines)


@routes.get("/flows")
async def flows_page(request: web.Request) -> web.Response:
    console = console_of(request)
    data = await console.reads.query(subjects.CORE_CATALOG_FLOWS_LIST)
    flows = [
        (int(f["revision"]), FlowDefinition.model_validate(f["definition"]))
        for f in data.get("flows", [])
    ]
    flows.sort(key=lambda f: f[1].id)
    return render(request, console.templates, "flows/list.html", flows=flows)


@routes.get("/flows/{flow_id}")
async def flow_page(request: web.Request) -> web.Response:
    console = console_of(request)
    flow_id = flow_id_of(request)
    try:
        choice = RevisionChoice.model_validate(dict(request.query))
    except ValidationError as exc:
        raise bad_request(exc) from None
    revisions = await catalog_history(console.bus, CatalogKind.FLOW, flow_id)
    known = {r.revision for r in revisions}
    for name in ("revision", "a", "b"):
        number = getattr(choice, name)
        if number is not None and revisions and number not in known:
            raise web.HTTPBadRequest(
                text=f"{name}: flow {flow_id} has no revision {number} (it has 1 to {max(known)})"
            )
    if (choice.a is None) != (choice.b is None):
        raise web.HTTPBadRequest(text="a, b: a diff needs both revisions")
    revision, definition = await flow_at(console.reads, flow_id, choice.revision)
    diff = None
    if choice.a is not None and choice.b is not None:
        diff = revision_diff(
            flow_id,
            await flow_at(console.reads, flow_id, choice.a),
            await flow_at(console.reads, flow_id, choice.b),
        )
    return render(
        request,
        console.templates,
        "flows/page.html",
        flow_id=flow_id,
        revision=revision,
        definition=definition,
        document=as_yaml(definition),
        graph=graph_of(definition).to_json(),
        revisions=list(reversed(revisions)),
        a=choice.a,
        b=choice.b,
        diff=diff,
    )
