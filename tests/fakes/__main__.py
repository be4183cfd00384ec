"""Serve a fake as a long-running process: ``python -m tests.fakes plane|slack [options]``.

`make compose-test` runs the fake Plane and the fake Slack as compose services (profile
``test``) that plane-sync and channel-gateway talk to, and checks what they recorded through
the fakes' own APIs (Plane's REST API, Slack's ``conversations.replies``). The tests keep
starting the fakes in-process; this only adds an address, a port and, for Plane, what a
person does in Plane's UI as HTTP routes (the fake's methods are not reachable otherwise):

- ``POST /_fake/human/work-items`` ``{"name": ..., "labels": [...]}``: a person creates a
  work item (webhooks sent with the person as actor); answers ``{"id": ...}``.
- ``GET /_fake/deliveries``: the webhook sends so far (event, status; null: no connection).

Like every route of the fake Plane they need the API key (``X-API-Key``).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from dataclasses import dataclass

from aiohttp import web

from tests.fakes.http import LocalHttpServer
from tests.fakes.plane import FakePlane
from tests.fakes.slack_api import FakeSlack


@dataclass
class ServedPlane(FakePlane):
    """The fake Plane with a person's actions as routes."""

    def _app(self) -> web.Application:
        app = super()._app()
        app.router.add_post("/_fake/human/work-items", self._human_create)
        app.router.add_get("/_fake/deliveries", self._list_deliveries)
        return app

    async def _human_create(self, request: web.Request) -> web.Response:
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return web.json_response({"error": "expected {name, labels}"}, status=400)
        labels = [str(label) for label in body.get("labels") or []]
        item = self.human_create_work_item(body["name"], labels=labels)
        return web.json_response({"id": item}, status=201)

    async def _list_deliveries(self, request: web.Request) -> web.Response:
        return web.json_response(
            [{"id": d.delivery_id, "event": d.event, "status": d.status} for d in self.deliveries]
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    kinds = parser.add_subparsers(dest="fake", required=True)
    plane = kinds.add_parser("plane", help="the fake Plane REST API and its webhooks")
    plane.add_argument("--api-key", default="plane-test-key")
    plane.add_argument("--workspace", default="nexus")
    plane.add_argument("--project-id", required=True)
    plane.add_argument("--rate-limit", type=int, default=60, help="calls a minute per key")
    plane.add_argument("--webhook", help="URL every change is POSTed to, signed")
    plane.add_argument("--webhook-secret", default="")
    slack = kinds.add_parser("slack", help="the fake Slack Web API")
    slack.add_argument("--token", default="xoxb-test")
    slack.add_argument("--team", default="T1")
    slack.add_argument("--bot-user", default="UBOT")
    return parser


async def _serve(args: argparse.Namespace) -> None:
    http = LocalHttpServer(args.host, args.port)
    fake: ServedPlane | FakeSlack
    if args.fake == "plane":
        fake = ServedPlane(
            api_key=args.api_key, workspace=args.workspace, project_id=args.project_id,
            rate_limit=args.rate_limit, _http=http,
        )  # fmt: skip
        if args.webhook:
            fake.add_webhook(args.webhook, args.webhook_secret)
    else:
        fake = FakeSlack(token=args.token, team=args.team, bot_user=args.bot_user)
        fake._http = http
    stop = asyncio.Event()
    # As PID 1 of a container the default SIGTERM action is none: stop on it explicitly.
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with fake:
        print(f"fake {args.fake} serving on {http.url}", flush=True)
        await stop.wait()
        if isinstance(fake, FakePlane):
            await fake.settle()


def main() -> None:
    asyncio.run(_serve(_parser().parse_args()))


if __name__ == "__main__":
    main()
