"""Agents and skills: the catalog's lists, and each item's definition (YAML), its revisions
and the unified diff between two; live by re-fetching once per burst of catalog events."""

from __future__ import annotations

import difflib
from typing import Any

import yaml
from aiohttp import web
from nexus_events.contract import subjects
from nexus_events.contract.subjects import CatalogKind, Family
from nexus_events.errors import InvalidSubject
from pydantic import BaseModel, ConfigDict, ValidationError

from nexus_console.canary_standing import CanaryDecision, canary_decisions, canary_view
from nexus_console.catalog_history import Revision, catalog_history
from nexus_console.context import console_of
from nexus_console.forms import bad_request
from nexus_console.live.hub import LiveEvent
from nexus_console.live.sse import format_since, serve_events
from nexus_console.rendering import render

routes = web.RouteTableDef()

STALE = "stale"
SHOWN = (CatalogKind.AGENT, CatalogKind.SKILL)


class RevisionChoice(BaseModel):
    """The item page's query string: which revision to show, which two to diff."""

    model_config = ConfigDict(extra="ignore")

    rev: int | None = None
    a: int | None = None
    b: int | None = None


def as_yaml(definition: dict[str, Any] | None) -> str:
    return "" if definition is None else yaml.safe_dump(definition, sort_keys=False)


def unified_diff(old: Revision, new: Revision) -> str:
    return "".join(
        difflib.unified_diff(
            as_yaml(old.definition).splitlines(keepends=True),
            as_yaml(new.definition).splitlines(keepends=True),
            fromfile=f"revision {old.revision}",
            tofile=f"revision {new.revision}",
        )
    )


def history_rows(
    revisions: list[Revision], decisions: list[CanaryDecision]
) -> list[Revision | CanaryDecision]:
    """Revisions and canary decisions in one history, newest first (by stored time; a
    decision and the revision it causes keep the stream's order)."""
    merged: list[tuple[str, int, Revision | CanaryDecision]] = [
        (r.time or "", i, r) for i, r in enumerate(revisions)
    ]
    merged += [(d.time or "", len(revisions) + i, d) for i, d in enumerate(decisions)]
    return [row for _, _, row in sorted(merged, key=lambda t: (t[0], t[1]), reverse=True)]


def _is_htmx_for(request: web.Request, target: str) -> bool:
    return (
        request.headers.get("HX-Request") == "true" and request.headers.get("HX-Target") == target
    )


@routes.get("/catalog")
async def catalog_page(request: web.Request) -> web.Response:
    console = console_of(request)
    position = console.hub.position()
    agents = await console.reads.query(subjects.CORE_CATALOG_AGENTS_LIST)
    skills = await console.reads.query(subjects.CORE_CATALOG_SKILLS_LIST)
    context = {
        "agents": agents.get("agents", []),
        "skills": skills.get("skills", []),
        "since": format_since(position),
    }
    name = "catalog/_lists.html" if _is_htmx_for(request, "catalog") else "catalog/page.html"
    return render(request, console.templates, name, **context)


async def _item_page(request: web.Request, kind: CatalogKind, item_id: str) -> web.Response:
    console = console_of(request)
    try:
        subjects.validate_token(item_id, f"{kind.value} id")
        choice = RevisionChoice.model_validate(dict(request.query))
    except ValidationError as exc:
        raise bad_request(exc) from None
    except InvalidSubject as exc:
        raise web.HTTPNotFound(text=f"no {kind.value} {item_id!r}: {exc}") from None
    position = console.hub.position()
    canary = None
    decisions: list[CanaryDecision] = []
    if kind is CatalogKind.AGENT:
        current = await console.reads.query(subjects.CORE_CATALOG_AGENTS_GET, {"id": item_id})
        definition = current["definition"]
        canary = canary_view(current, subjects.CORE_CATALOG_AGENTS_GET)
        decisions = await canary_decisions(console.bus, item_id)
    else:
        current = await console.reads.query(subjects.CORE_CATALOG_SKILLS_GET, {"name": item_id})
        definition = current["skill"]
    revisions = await catalog_history(console.bus, kind, item_id)
    by_number = {r.revision: r for r in revisions}
    for field in ("rev", "a", "b"):
        number = getattr(choice, field)
        if number is not None and number not in by_number:
            raise web.HTTPBadRequest(
                text=f"{field}: {kind.value} {item_id} has no revision {number}"
            )
    if (choice.a is None) != (choice.b is None):
        raise web.HTTPBadRequest(text="a, b: a diff needs both revisions")
    shown = by_number[choice.rev] if choice.rev is not None else None
    diff = (
        unified_diff(by_number[choice.a], by_number[choice.b])
        if choice.a is not None and choice.b is not None
        else None
    )
    context = {
        "kind": kind.value,
        "item_id": item_id,
        "revision": current["revision"],
        "yaml": as_yaml(shown.definition if shown else definition),
        "shown": shown,
        "history": history_rows(revisions, decisions),
        "canary": canary,
        "decisions": decisions,
        "diff": diff,
        "a": choice.a,
        "b": choice.b,
        "since": format_since(position),
    }
    name = "catalog/_item.html" if _is_htmx_for(request, "item") else "catalog/item.html"
    return render(request, console.templates, name, **context)


@routes.get("/catalog/agents/{id}")
async def agent_page(request: web.Request) -> web.Response:
    return await _item_page(request, CatalogKind.AGENT, request.match_info["id"])


@routes.get("/catalog/skills/{name}")
async def skill_page(request: web.Request) -> web.Response:
    return await _item_page(request, CatalogKind.SKILL, request.match_info["name"])


@routes.get("/live/catalog")
async def catalog_live(request: web.Request) -> web.StreamResponse:
    kind = request.query.get("kind")
    item_id = request.query.get("id")

    def wants(event: LiveEvent) -> bool:
        if event.family is not Family.CATALOG or event.ids.get("kind") not in [
            k.value for k in SHOWN
        ]:
            return False
        return (kind is None or event.ids.get("kind") == kind) and (
            item_id is None or event.ids.get("id") == item_id
        )

    def render_event(event: LiveEvent) -> list[tuple[str, str]]:
        return [(STALE, event.name or "")]

    return await serve_events(request, wants, render_event)
