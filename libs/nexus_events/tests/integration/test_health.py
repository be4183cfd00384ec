"""The health endpoint on a real socket: probes follow readiness, a taken port is reported."""

from __future__ import annotations

import socket

import pytest
from nexus_events.errors import HealthUnavailable, NexusError
from nexus_events.health import HealthServer
from nexus_events.testing import http_status


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
