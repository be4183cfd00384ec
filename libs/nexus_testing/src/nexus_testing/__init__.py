"""Test support of the workspace, never shipped in a service: real servers and waiting helpers.

- ``nexus_testing.fixtures`` is the pytest plugin (``-p nexus_testing.fixtures``, root
  pyproject): ``nats_server``, ``nats_url``, ``bus``, ``nats_cluster``, ``postgres_server``,
  ``pg_dsn``, ``pg_pool``.
- ``nexus_testing.browser`` is the browser plugin (``-p nexus_testing.browser``): ``chromium``
  (one headless Debian Chromium per worker), ``browser`` and ``page`` (Playwright, per test),
  and `screenshot(page, name)` for docs/console/.
- `NatsServer` / `NatsCluster` / `PostgresServer`: the real servers behind them, also started
  by the smoke script and the benchmarks.
- `eventually` (`eventually_blocking` in synchronous tests): wait for a condition with a
  deadline instead of sleeping.
- `free_port`, `http_status`, `micro_stats`, `endpoint_requests`, `dead_letters`: probes.
"""

from nexus_testing.nats_cluster import NatsCluster
from nexus_testing.nats_server import SERVER_START_TIMEOUT, NatsServer, nats_server_binary
from nexus_testing.polling import eventually, eventually_blocking
from nexus_testing.postgres import PostgresServer
from nexus_testing.probes import (
    dead_letters,
    endpoint_requests,
    free_port,
    http_status,
    micro_stats,
)

__all__ = [
    "SERVER_START_TIMEOUT",
    "NatsCluster",
    "NatsServer",
    "PostgresServer",
    "dead_letters",
    "endpoint_requests",
    "eventually",
    "eventually_blocking",
    "free_port",
    "http_status",
    "micro_stats",
    "nats_server_binary",
]
