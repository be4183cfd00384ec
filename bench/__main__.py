"""`make bench`: start real servers once, run every benchmark, print figures and ratios."""

from __future__ import annotations

import asyncio
import gc
import importlib
import inspect
import logging
import pkgutil
import sys
from typing import Any

from nexus_core.config import CoreSettings
from nexus_events.runtime.process import tune_gc

from bench import bus_bench, projection_bench
from bench.servers import servers

Row = tuple[str, float, str, float]


def _print(title: str, rows: list[Row]) -> None:
    print(f"\n== {title}")
    for name, value, baseline, ratio in rows:
        vs = f"  ({ratio:6.1%} of {baseline})" if baseline else ""
        figure = f"{value:>12,.0f}" if value >= 100 else f"{value:>12.2f}"
        print(f"  {name:<48} {figure}{vs}")


async def _extra(nats_url: str, dsn: str, only: set[str]) -> None:
    # Service benchmarks (bench/bench_<service>.py) expose `run(...)` returning rows.
    import bench

    for info in pkgutil.iter_modules(bench.__path__):
        if not info.name.startswith("bench_"):
            continue
        if only and info.name.removeprefix("bench_") not in only:
            continue
        module = importlib.import_module(f"bench.{info.name}")
        params = inspect.signature(module.run).parameters
        kwargs: dict[str, Any] = {}
        if "nats_url" in params:
            kwargs["nats_url"] = nats_url
        if "dsn" in params:
            kwargs["dsn"] = dsn
        gc.collect()  # none starts with the garbage of the one before
        _print(info.name.removeprefix("bench_"), await module.run(**kwargs))


async def main(only: set[str]) -> None:
    """Every benchmark, or (`python -m bench memory core`) only the named service ones."""
    logging.basicConfig(level=logging.WARNING)
    # As the services run (core's __main__): startup objects frozen, fewer young collections.
    tune_gc(CoreSettings().effective_gc_threshold())
    with servers() as (nats, pg):
        if not only:
            _print("bus (nats-server, same run)", await bus_bench.run(nats.url))
            dsn = await pg.create_database("bench")
            _print("projection (PostgreSQL, same run)", await projection_bench.run(nats.url, dsn))
        await _extra(nats.url, await pg.create_database("bench"), only)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(set(sys.argv[1:]))))
