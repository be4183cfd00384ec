"""Small probes for tests of service processes: a free port, an HTTP status, nats.micro stats,
and what the dead letter stream holds."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from nexus_events.runtime import ports

if TYPE_CHECKING:
    from nexus_events.events.dlq import DeadLetter
    from nexus_events.transport.bus import Bus


async def dead_letters(bus: Bus) -> list[DeadLetter]:
    """Every dead letter in NEXUS_DLQ, in stream order."""
    from nexus_events.contract.streams import DLQ
    from nexus_events.events.dlq import DeadLetter
    from nexus_events.transport.bus import decode_msg

    letters = []
    async for msg in bus.replay_raw(DLQ):
        letter = decode_msg(msg).event
        assert isinstance(letter, DeadLetter), letter
        letters.append(letter)
    return letters


async def micro_stats(bus: Bus, service: str, instances: int) -> list[dict[str, Any]]:
    """``$SRV.STATS.<service>`` from each of `instances` instances of a nats.micro service
    (every instance answers once): which replicas serve queries."""
    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox, max_msgs=instances)
    await bus.nc.publish(f"$SRV.STATS.{service}", b"", reply=inbox)
    replies = [json.loads((await sub.next_msg(timeout=5)).data) for _ in range(instances)]
    await sub.unsubscribe()
    return replies


def endpoint_requests(stats: dict[str, Any], endpoint: str) -> int:
    """How many requests one instance's `micro_stats` says `endpoint` answered."""
    return int(next(e["num_requests"] for e in stats["endpoints"] if e["name"] == endpoint))


def free_port() -> int:
    """A TCP port on 127.0.0.1 to listen on (`nexus_events.runtime.ports`: outside the
    ephemeral range, so no outgoing connection takes it first)."""
    return ports.free_port()


async def http_status(port: int, path: str) -> int:
    """The status code of ``GET path`` on 127.0.0.1:`port`; 0 if nothing answers there."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return 0
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return int(line.split()[1]) if line else 0
