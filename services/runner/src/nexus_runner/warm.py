"""``python -m nexus_runner --warm``: a runner started before its run, handed it on stdin.

Its imports (the run's lifecycle, the model client, MCP) are done before it reads anything,
and it holds no credential and opens no connection until then. It reads ONE line from stdin,
a `WarmHandoff` (docs/warm-starts.md): the run's own environment is set first, then the
runner's settings are read and the run goes on exactly as ``--config`` would run it, in the
workspace the handoff names. It serves that one run and exits; stdin is /dev/null from the
read on, so no tool inherits the scheduler's pipe. EOF without a handoff (the scheduler
discarding the runner) exits 0 quietly; a malformed handoff exits 2 with one line on stderr.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

# Imported for their cost, before the handoff: what a run loads (openai's chat resources are
# imported lazily on first use, the OTLP exporter by the telemetry setup).
import openai.resources.chat  # noqa: F401
from nexus_events.events.warm import WarmHandoff
from nexus_events.runtime import telemetry
from nexus_events.runtime.logs import setup_logging
from nexus_events.runtime.process import load_settings
from nexus_events.transport.bus import Bus, BusSettings
from pydantic import ValidationError

from nexus_runner.app import serve_run
from nexus_runner.config import RunnerSettings

EXIT_BAD_HANDOFF = 2


def read_handoff() -> WarmHandoff | None:
    """The handoff line on stdin (None at EOF); stdin is /dev/null afterwards."""
    line = sys.stdin.buffer.readline()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # what the run's tools would inherit
    os.close(devnull)
    if not line.strip():
        return None
    try:
        return WarmHandoff.model_validate_json(line)
    except ValidationError as exc:
        first = str(exc).splitlines()
        print(f"nexus-runner --warm: malformed handoff: {' '.join(first[:3])}", file=sys.stderr)
        sys.exit(EXIT_BAD_HANDOFF)


async def serve(handoff: WarmHandoff, settings: RunnerSettings) -> int:
    """Run the handed run as ``--config`` runs it; 0 when it completed."""
    bus = await Bus.connect(BusSettings(), source="runner")
    try:
        workspace = Path(handoff.workspace) if handoff.workspace else None
        return await serve_run(
            handoff.config,
            settings,
            bus,
            trace_context=telemetry.context_from_env(),  # TRACEPARENT, from the handoff
            workspace_dir=workspace,
        )
    finally:
        await bus.close()


def main() -> None:
    handoff = read_handoff()
    if handoff is None:
        sys.exit(0)  # discarded before any run: nothing to say
    os.environ.update(handoff.env)  # the run's own: before its settings are read
    settings = load_settings("runner", RunnerSettings)  # bad settings: one line, exit 2
    setup_logging("runner")
    telemetry.setup_telemetry("runner")
    try:
        code = asyncio.run(serve(handoff, settings))
    finally:
        telemetry.shutdown_telemetry()
    sys.exit(code)
