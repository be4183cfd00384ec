"""The health endpoint on a real socket: probes follow readiness, a taken port is reported."""

from __future__ import annotations

import socket

import pytest
from nexus_events.errors import HealthUnavailable, NexusError
from nexus_events.runtime.health import HealthServer
from nexus_testing import http_status


async def test_probes_follow_readiness():
    ready = False
    server = HealthServer(lambda: ready, "127.0.0.1", 0)
    await server.start()
    try:
        assert server.port > 0
        assert await http_status(server.port, "/healthz") == 200
        assert await http_status(server.port, "/readyz") == 503
        ready = True
        assert await http_status(server.port, "/readyz") == 200
        assert await http_status(server.port, "/other") == 404
    finally:
        await server.stop()
    assert await http_status(server.port, "/healthz") == 0


async def test_a_taken_port_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(HealthUnavailable, match=f"cannot listen on 127.0.0.1:{port}") as info:
            await HealthServer(lambda: True, "127.0.0.1", port).start()
    assert isinstance(info.value, NexusError)
    assert isinstance(info.value, OSError)


async def test_answers_http_clients_over_one_kept_alive_connection():
    """A real HTTP client (aiohttp's, keep-alive and all) gets the probes' statuses and
    bodies; requests on one connection follow readiness as it changes."""
    import aiohttp

    ready = False
    server = HealthServer(lambda: ready, "127.0.0.1", 0)
    await server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        connector = aiohttp.TCPConnector(limit=1)  # one connection, reused
        async with aiohttp.ClientSession(connector=connector) as http:
            async with http.get(f"{base}/healthz") as live:
                assert (live.status, await live.text()) == (200, "ok")
            async with http.get(f"{base}/readyz") as readyz:
                assert (readyz.status, await readyz.text()) == (503, "service unavailable")
            ready = True
            async with http.get(f"{base}/readyz") as readyz:
                assert (readyz.status, await readyz.text()) == (200, "ok")
            async with http.head(f"{base}/readyz") as head:
                assert head.status == 200
            async with http.post(f"{base}/readyz") as post:
                assert post.status == 405
    finally:
        await server.stop()
