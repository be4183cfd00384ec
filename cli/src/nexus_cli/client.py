"""A command's connection to Nexus: the bus, core's queries, errors mapped to exit codes."""

from __future__ import annotations

import getpass
import json
from types import TracebackType
from typing import Any

import nats.errors
from nexus_events.contract import subjects
from nexus_events.errors import (
    BusError,
    BusUnavailable,
)
from nexus_events.transport.bus import Bus
from nexus_events.transport.micro import read_reply

from nexus_cli.errors import CliError, ExitCode, bus_failure
from nexus_cli.target import Target

SOURCE = "cli"


def whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


class Session:
    """``async with Session(target, timeout) as s:`` connects; `s.bus`, `s.query(...)`."""

    def __init__(
        self,
        target: Target,
        timeout: float,
        *,
        user: str | None = None,
        password: str | None = None,
        name: str = "nexus-cli",
        persistent: bool = False,
    ) -> None:
        """`user`/`password`: a NATS identity other than the CLI's own (the MCP server's
        tokens); `persistent`: a long-lived process that reconnects for as long as it runs."""
        self.target = target
        self.timeout = timeout
        self._user = user
        self._password = password
        self._name = name
        self._persistent = persistent
        self._bus: Bus | None = None

    @property
    def bus(self) -> Bus:
        if self._bus is None:
            raise RuntimeError("Session is not connected")
        return self._bus

    async def __aenter__(self) -> Session:
        settings = self.target.bus_settings(
            name=self._name,
            connect_timeout=min(self.timeout, 2.0),
            connect_attempts=1,
            max_reconnect_attempts=-1 if self._persistent else 3,
            publish_timeout=self.timeout,
            publish_deadline=max(self.timeout * 2, 5.0),
        )
        if self._user is not None:
            settings = settings.model_copy(update={"user": self._user, "password": self._password})
        try:
            self._bus = await Bus.connect(settings, source=SOURCE)
        except BusUnavailable as exc:
            raise CliError(
                f"cannot reach NATS at {self.target.shown_url}",
                hint="is the stack up? `nexus dev status` or `nexus doctor`",
                code=ExitCode.UNAVAILABLE,
            ) from exc
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bus is not None:
            await self._bus.close()
            self._bus = None

    async def query(
        self,
        subject: str,
        body: dict[str, Any] | None = None,
        *,
        service: str = "core",
        wait: float | None = None,
    ) -> dict[str, Any]:
        """Ask `service` (core unless named); 404 -> exit 3, 400 and 422 (refused, e.g. a
        secret) -> exit 2, nobody answering -> 4, no reply within `wait` seconds (default: the
        session's timeout) -> 5."""
        payload = json.dumps(body or {}).encode()
        wait = self.timeout if wait is None else wait
        try:
            reply = await self.bus.nc.request(subject, payload, timeout=wait)
        except nats.errors.NoRespondersError:
            raise CliError(
                f"nothing answers {subject}: {service} is not running",
                hint="`nexus dev status` (dev stack) or `nexus doctor`",
                code=ExitCode.UNAVAILABLE,
            ) from None
        except nats.errors.TimeoutError:
            raise CliError(
                f"no reply on {subject} within {wait:.1f}s",
                hint=f"{service} may be overloaded or restarting; retry, or raise --timeout",
                code=ExitCode.TIMEOUT,
            ) from None
        answer = read_reply(reply)
        error_code = answer.error_code
        if error_code is None:
            if not isinstance(answer.data, dict):
                raise CliError(f"{subject} answered no JSON object", code=ExitCode.UNAVAILABLE)
            return answer.data
        message = answer.message or "no message"
        fields = [f"{f.get('loc')}: {f.get('msg')}" for f in answer.fields]
        if error_code == "404":
            raise CliError(message, code=ExitCode.NOT_FOUND)
        if error_code == "400":
            # Core's message names the first bad field; list them only when there are more.
            details = fields if len(fields) > 1 else []
            raise CliError(message, code=ExitCode.INVALID, details=details)
        if error_code == "422":
            # Understood but refused (memory's secret guard): the message says why.
            raise CliError(message, code=ExitCode.INVALID)
        raise CliError(f"{subject} failed: {message}", code=ExitCode.UNAVAILABLE)

    async def get_run(self, run_id: str) -> dict[str, Any]:
        """The run as core projects it; exit 2 for a malformed id, 3 if there is no such run."""
        check_token(run_id, "run id")
        try:
            return await self.query(subjects.CORE_RUNS_GET, {"run_id": run_id})
        except CliError as exc:
            if exc.code is ExitCode.NOT_FOUND:
                exc.message = f"no run {run_id!r}"
                exc.hint = "`nexus ps --all` lists runs"
            raise

    async def publish_guarded(self, coro: Any) -> Any:
        try:
            return await coro
        except BusError as exc:
            raise bus_failure(exc, "could not publish") from exc


def check_token(value: str, what: str) -> str:
    from nexus_events.errors import InvalidSubject

    try:
        return subjects.validate_token(value, what)
    except InvalidSubject as exc:
        raise CliError(str(exc), code=ExitCode.INVALID) from None
