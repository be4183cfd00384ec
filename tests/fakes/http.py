"""The HTTP side every fake shares: an aiohttp app on a free loopback port."""

from __future__ import annotations

import abc
from typing import Self

from aiohttp import web


class LocalHttpServer:
    """Serves one aiohttp app on 127.0.0.1 and a port the OS picks (tests), or on a given
    address and port (``python -m tests.fakes``, a fake as a compose service)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._runner: web.AppRunner | None = None
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def serve(self, app: web.Application) -> None:
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class ServedFake(abc.ABC):
    """`start`/`stop`, ``async with`` and `port` for a fake whose `_app` its `_http` serves."""

    _http: LocalHttpServer

    @abc.abstractmethod
    def _app(self) -> web.Application:
        """The fake's routes."""

    async def start(self) -> None:
        await self._http.serve(self._app())

    async def stop(self) -> None:
        await self._http.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        return self._http.port
