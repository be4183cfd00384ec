"""A stand-in for the flows service's queries in the CLI tests: answers nexus.flows.v1.list|get
on the test's real NATS from a dict of FlowRunView (the service itself is built apart)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from nats.aio.msg import Msg
from nexus_events.contract import subjects
from nexus_events.events.flows import FlowRunView, FlowsGet, FlowsList, FlowsListReply
from nexus_events.transport.bus import Bus


class FlowsResponder:
    def __init__(self, views: list[FlowRunView]) -> None:
        self.views = {v.flow_run_id: v for v in views}
        self.list_queries: list[FlowsList] = []

    async def on_list(self, msg: Msg) -> None:
        query = FlowsList.model_validate_json(msg.data)
        self.list_queries.append(query)
        found = [
            v
            for v in reversed(self.views.values())  # newest first: the last added
            if (query.status is None or v.status == query.status)
            and (query.flow is None or v.flow == query.flow)
            and (query.task_id is None or v.task_id == query.task_id)
        ][: query.limit]
        await msg.respond(FlowsListReply(flows=found).model_dump_json().encode())

    async def on_get(self, msg: Msg, nc: Any) -> None:
        query = FlowsGet.model_validate_json(msg.data)
        view = self.views.get(query.flow_run_id)
        if view is not None:
            await msg.respond(view.model_dump_json().encode())
            return
        # The error shape of a nats.micro service (what the CLI's query maps to exit 3).
        body = {"error": {"code": 404, "message": f"no flow run {query.flow_run_id!r}"}}
        await nc.publish(
            msg.reply,
            json.dumps(body).encode(),
            headers={"Nats-Service-Error-Code": "404", "Nats-Service-Error": "not found"},
        )


@asynccontextmanager
async def flows_service(bus: Bus, views: list[FlowRunView]) -> AsyncIterator[FlowsResponder]:
    responder = FlowsResponder(views)
    nc = bus.nc

    async def on_get(msg: Msg) -> None:
        await responder.on_get(msg, nc)

    subs = [
        await nc.subscribe(subjects.FLOWS_LIST, cb=responder.on_list),
        await nc.subscribe(subjects.FLOWS_GET, cb=on_get),
    ]
    await nc.flush()
    try:
        yield responder
    finally:
        for sub in subs:
            await sub.unsubscribe()
