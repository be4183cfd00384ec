"""Asking the services' queries (core, flows) on behalf of a page: the reply as a dict, or
an error a page turns into 404, 400 or 503 with the service's own one-line reason."""

from __future__ import annotations

import json
from typing import Any

import nats.errors
from nats.aio.client import Client as NatsClient
from nexus_events.transport.micro import read_reply


class QueryError(Exception):
    """A query did not answer with data. `status`: the HTTP status a page shows for it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Reads:
    """Request/reply queries over the console's own NATS connection."""

    def __init__(self, nc: NatsClient, timeout: float) -> None:
        self.nc = nc
        self.timeout = timeout

    async def query(self, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = json.dumps(body or {}).encode()
        try:
            reply = await self.nc.request(subject, payload, timeout=self.timeout)
        except nats.errors.NoRespondersError:
            raise QueryError(503, f"nothing answers {subject}: is the service running?") from None
        except nats.errors.TimeoutError:
            raise QueryError(503, f"no reply on {subject} within {self.timeout:.1f}s") from None
        except nats.errors.Error as exc:
            raise QueryError(503, f"{subject}: NATS: {exc}") from None
        answer = read_reply(reply)
        if answer.error_code is None:
            if not isinstance(answer.data, dict):
                raise QueryError(502, f"{subject} answered no JSON object")
            return answer.data
        code = answer.error_code
        status = int(code) if code in ("400", "404", "422") else 502
        raise QueryError(status, answer.message or code)
