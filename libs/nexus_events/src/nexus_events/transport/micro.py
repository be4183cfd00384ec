"""Request/reply endpoints as nats.micro services: one way to parse, answer and fail.

Every endpoint takes a JSON object (an empty body means ``{}``) and answers JSON, errors
included: a nats.micro error reply (``Nats-Service-Error-Code`` 400/404/409/500, or 503 when
NATS fails under the request) whose body is `QueryErrorReply`
(``{"error": {"code", "message", "fields": [{"loc", "msg"}]}}``), never an empty body or a
timeout. Bodies are validated as the contract's pydantic request models
before a handler sees them; a handler that fails anyway answers 500 and logs the request.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import EndpointConfig, Service, ServiceConfig
from pydantic import BaseModel, ValidationError

from nexus_events.contract.subjects import validate_token
from nexus_events.errors import BusError, InvalidSubject

log = logging.getLogger(__name__)

# How much of a failed request's body the error log shows: enough to reproduce most requests
# without letting one request flood the log.
LOGGED_BODY = 512

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[None]]


# The version every Nexus nats.micro service reports (`nats micro info`).
SERVICE_VERSION = "0.1.0"


async def start_service(
    nc: NatsClient, name: str, description: str, endpoints: Iterable[tuple[str, str, Handler]]
) -> Service:
    """Start the nats.micro service `name` with its (endpoint name, subject, handler) list;
    stop it with `stop_service`."""
    service = await add_service(
        nc, ServiceConfig(name=name, version=SERVICE_VERSION, description=description)
    )
    for endpoint, subject, handler in endpoints:
        await service.add_endpoint(EndpointConfig(name=endpoint, subject=subject, handler=handler))
    return service


async def stop_service(service: Service | None) -> None:
    """Stop a service started by `start_service` (None: nothing was started)."""
    if service is not None:
        await service.stop()


class QueryError(Exception):
    """A request cannot be answered: `code` is the reply's error code (400, 404, ...);
    `fields` lists the bad fields of a 400 as ``{"loc", "msg"}`` objects."""

    def __init__(self, code: int, message: str, fields: list[dict[str, str]] | None = None) -> None:
        self.code = code
        self.fields = fields or []
        super().__init__(message)


def one_line(text: str) -> str:
    """`text` with every run of whitespace or control characters made one space, so that it
    fits a NATS header and a terminal line."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


@dataclass(frozen=True, slots=True)
class QueryReply:
    """A query's reply as a caller reads it: `data` is its JSON (None when the body is not
    JSON); on an error reply, `error_code` is the service's code ("400", "404", ...) and
    `message` and `fields` what its `QueryErrorReply` says."""

    data: Any
    error_code: str | None = None
    message: str = ""
    fields: list[dict[str, Any]] = field(default_factory=list)


def read_reply(reply: Msg) -> QueryReply:
    """Split a reply into its data or its error, the one way every caller reads them."""
    headers = reply.headers or {}
    try:
        data = json.loads(reply.data or b"{}")
    except ValueError:
        # Not JSON (a stray responder, an old service): still an answer its caller can name.
        data = None
    code = headers.get("Nats-Service-Error-Code")
    if code is None:
        return QueryReply(data)
    err = data.get("error") if isinstance(data, dict) else None
    err = err if isinstance(err, dict) else {}
    message = one_line(str(err.get("message") or headers.get("Nats-Service-Error") or ""))
    fields = [f for f in err.get("fields") or [] if isinstance(f, dict)]
    return QueryReply(data, code, message, fields)


def parse_query(model: type[M], data: bytes) -> M:
    """Validate a request body (empty means ``{}``) as `model`.

    Raises `QueryError` (400) whose message names the first bad field and whose `fields` list
    every problem; invalid JSON, invalid UTF-8 and non-object bodies are problems of ``(body)``.
    """
    try:
        return model.model_validate_json(data.strip() or b"{}")
    except ValidationError as exc:
        fields = [
            {"loc": ".".join(str(p) for p in e["loc"]) or "(body)", "msg": one_line(e["msg"])}
            for e in exc.errors(include_url=False, include_input=False)
        ]
    first = fields[0]
    more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    raise QueryError(400, f"invalid request: {first['loc']}: {first['msg']}{more}", fields)


def endpoint_handler(
    model: type[M], fn: Callable[[M], Awaitable[Any]], *, service: str = "the service"
) -> Handler:
    """A nats.micro handler that validates the body as `model`, calls `fn` and answers its
    result as JSON (a pydantic model or anything `json.dumps` takes).

    A `QueryError` becomes its error reply; a `BusError` (NATS failing under the request)
    a 503 logged in one line; any other exception is logged with the subject and body, and
    answered as a JSON 500 (the requester never waits in vain).
    """

    async def handler(request: Request) -> None:
        try:
            query = parse_query(model, request.data)
            result = await fn(query)
            body = (
                result.model_dump_json().encode()
                if isinstance(result, BaseModel)
                else json.dumps(result, default=str).encode()
            )
        except QueryError as exc:
            await _error(request, exc.code, str(exc), exc.fields)
            return
        except BusError as exc:
            # NATS itself failing under the request (a node lost, a pull refused mid-read) is
            # a fault of the moment, not of the service: a one-line 503 the caller may retry.
            log.warning("request on %s: the bus failed: %s", request.subject, one_line(str(exc)))
            message = f"{request.subject}: the bus is unavailable ({exc}); retry"
            await _error(request, 503, message, [])
            return
        except Exception:  # one request's boundary: log it, answer 500, serve the next
            log.exception(
                "request on %s failed; body %r", request.subject, request.data[:LOGGED_BODY]
            )
            message = f"internal error answering {request.subject}; the {service} log has details"
            await _error(request, 500, message, [])
            return
        await _respond(request, body)

    return handler


def per_run_handler(
    model: type[M], fn: Callable[[str, M], Awaitable[Any]], *, service: str = "the service"
) -> Handler:
    """`endpoint_handler` for a subject whose last token is a run id (``...<prefix>.<run_id>``,
    a run's credential may ask for its own run only): `fn` gets the run id and the body."""

    async def handler(request: Request) -> None:
        run_id = request.subject.rsplit(".", 1)[-1]

        async def answer(query: M) -> Any:
            try:
                validate_token(run_id, "run id")
            except InvalidSubject as exc:
                raise QueryError(400, str(exc)) from exc
            return await fn(run_id, query)

        await endpoint_handler(model, answer, service=service)(request)

    return handler


async def _error(request: Request, code: int, message: str, fields: list[dict[str, str]]) -> None:
    message = one_line(message)
    body = json.dumps({"error": {"code": code, "message": message, "fields": fields}}).encode()
    await _respond(request, body, error=(code, message))


async def _respond(request: Request, body: bytes, error: tuple[int, str] | None = None) -> None:
    # A request published without a reply subject, or a connection lost meanwhile, has nobody
    # to answer: log it rather than let nats.micro try (and fail) a second reply.
    try:
        if error is None:
            await request.respond(body)
        else:
            await request.respond_error(str(error[0]), error[1], data=body)
    except Exception:  # nothing else can be done for this request
        log.warning("could not answer a request on %s", request.subject, exc_info=True)


__all__ = [
    "LOGGED_BODY",
    "SERVICE_VERSION",
    "Handler",
    "QueryError",
    "endpoint_handler",
    "one_line",
    "parse_query",
    "start_service",
    "stop_service",
]
