"""A run's egress proxy for its lifetime: started only if the agent has grants."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from urllib.parse import urlsplit

from nexus_events.events import RunConfig

from nexus_runner.egress.access import EgressAccess
from nexus_runner.egress.policy import Reserved
from nexus_runner.egress.proxy import EgressProxy, ProxyLimits, Record, Resolve, resolve_host
from nexus_runner.safety import SecretRegistry

_DEFAULT_PORTS = {"http": 80, "https": 443, "nats": 4222, "tls": 4222}


async def reserved_endpoints(urls: Iterable[str | None], resolve: Resolve) -> Reserved:
    """The runner's own endpoints (by name and by every address the name resolves to)."""
    pairs: list[tuple[str, int]] = []
    for url in urls:
        if not url:
            continue
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        host = parts.hostname
        if host is None:
            continue
        try:
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 443)
        except ValueError:
            continue
        pairs.append((host, port))
        with contextlib.suppress(OSError, ValueError):
            pairs += [(str(a), port) for a in await resolve(host, port)]
    return Reserved.of(pairs)


@contextlib.asynccontextmanager
async def run_egress(
    config: RunConfig,
    *,
    runner_urls: Iterable[str | None],
    secrets: SecretRegistry,
    record: Record,
    limits: ProxyLimits | None = None,
    resolve: Resolve = resolve_host,
) -> AsyncIterator[EgressAccess | None]:
    """The run's proxy while the block runs, or None when the agent has no egress grant.

    `runner_urls`: the model's base URL and the NATS servers, never reachable by the tools.
    The socket lives in a short private temp dir (a unix socket path is under 108 bytes).
    """
    if not config.egress:
        yield None
        return
    net_dir = Path(tempfile.mkdtemp(prefix="nx-egress-"))
    proxy = EgressProxy(
        config.egress,
        secrets=secrets,
        record=record,
        reserved=await reserved_endpoints(runner_urls, resolve),
        limits=limits,
        resolve=resolve,
    )
    access = EgressAccess(net_dir)
    try:
        await proxy.start(access.socket_path)
        yield access
    finally:
        await proxy.close()
        shutil.rmtree(net_dir, ignore_errors=True)
