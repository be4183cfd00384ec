"""``python -m nexus_runner --config run.json`` (or ``--run-id``, ``--warm``): run one agent run."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from nexus_events.events.runs import RunConfig
from nexus_events.runtime import telemetry
from nexus_events.runtime.logs import setup_logging
from nexus_events.runtime.process import load_settings
from nexus_events.transport.bus import Bus, BusSettings

from nexus_runner.app import load_prepared_from_bus, serve_run
from nexus_runner.config import RunnerSettings


async def _main(args: argparse.Namespace, settings: RunnerSettings) -> int:
    bus = await Bus.connect(BusSettings(), source="runner")
    try:
        # The run continues the trace of whoever started it: the scheduler's TRACEPARENT,
        # else (--run-id) the prepared event's.
        parent = telemetry.context_from_env()
        if args.config is not None:
            text = await asyncio.to_thread(Path(args.config).read_text)
            config = RunConfig.model_validate_json(text)
        else:
            config, prepared_trace = await load_prepared_from_bus(bus, args.run_id)
            parent = parent or prepared_trace
        return await serve_run(config, settings, bus, trace_context=parent)
    finally:
        await bus.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nexus-runner", description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="Path of a RunConfig JSON file.")
    source.add_argument("--run-id", help="Read the config from the run's prepared event.")
    source.add_argument("--warm", action="store_true", help="Wait for a WarmHandoff on stdin.")
    source.add_argument(
        "--warm-claim", action="store_true", help="A warm pod: wait on NEXUS_WARM_SLOT's subject."
    )
    args = parser.parse_args(argv)
    if args.warm:
        from nexus_runner.warm import main as serve_warm

        serve_warm()
    if args.warm_claim:
        from nexus_runner.warm_claim import main as serve_warm_claim

        serve_warm_claim()
    settings = load_settings("runner", RunnerSettings)  # bad settings: one line, exit 2
    setup_logging("runner")
    telemetry.setup_telemetry("runner")
    try:
        code = asyncio.run(_main(args, settings))
    finally:
        telemetry.shutdown_telemetry()  # export the buffered spans before the process ends
    sys.exit(code)


if __name__ == "__main__":
    main()
