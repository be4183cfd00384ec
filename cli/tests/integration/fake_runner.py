"""A stand-in runner for the CLI tests: ``python fake_runner.py --config FILE``, or ``--warm``
(a warm runner, docs/warm-starts.md: one WarmHandoff line on stdin, its env applied first).

Plays a run's part of the contract with the real library: `started`, log lines, then by the
run's input: ``hang`` waits for `cancel_requested` (or SIGTERM) and ends `cancelled`;
``approval`` asks for approval ``ap1`` and waits for the decision on the run's inbox;
``fail`` ends `failed`; anything else does one turn with one tool call and `completed`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nats.aio.msg import Msg
from nexus_events.contract import run_access, subjects
from nexus_events.events import (
    ApprovalDecided,
    ApprovalRequested,
    LogLine,
    RunCancelled,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunHeartbeat,
    RunResult,
    RunStarted,
    RunTurn,
    ToolCalled,
    ToolResult,
)
from nexus_events.events.warm import WarmHandoff
from nexus_events.transport.bus import Bus, BusSettings
from nexus_runner.followed import FollowedSubject


def _handed_off() -> RunConfig | None:
    """The run a warm start is handed (None: the scheduler discarded it), its env applied."""
    line = sys.stdin.buffer.readline()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    if not line.strip():
        return None
    handoff = WarmHandoff.model_validate_json(line)
    os.environ.update(handoff.env)
    return handoff.config


async def main(config: RunConfig) -> int:
    rid = config.run_id
    bus = await Bus.connect(BusSettings(), source="runner")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    # From the streams, as the real runner reads them: a run's NATS credential may make only
    # its own named consumers (nexus_events.contract.run_access), not subscribe to the subjects.
    cancels: asyncio.Queue[Msg] = asyncio.Queue()
    inbox: asyncio.Queue[Msg] = asyncio.Queue()
    followed = [
        FollowedSubject(
            bus,
            run_access.control_consumer(rid, config.attempt, "cancel_requested"),
            1,
            cancels.put,
        ),
        FollowedSubject(bus, run_access.inbox_consumer(rid, config.attempt), 1, inbox.put),
    ]
    for subject in followed:
        await subject.start()

    async def pub(name: str, event: object, key: str | None = None) -> None:
        await bus.publish(subjects.run_event(rid, name), event, msg_id=f"fake:{rid}:{key or name}")  # type: ignore[arg-type]

    try:
        await pub("started", RunStarted(runner="fake", runner_version="0"))
        for seq, text in enumerate(["cloning nothing", f"agent {config.agent_id} says hi"]):
            await bus.publish(
                subjects.run_log(rid), LogLine(seq=seq, text=text), msg_id=f"fake:{rid}:log{seq}"
            )
        if "hang" in config.input:
            await pub("heartbeat", RunHeartbeat(seq=0, phase="waiting"))
            waiter = asyncio.ensure_future(asyncio.wait_for(cancels.get(), 120))
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            await pub("cancelled", RunCancelled(message="stopped by the fake runner"))
            return 1
        if "approval" in config.input:
            expires = datetime.now(UTC) + timedelta(minutes=5)
            await pub(
                "approval_requested",
                ApprovalRequested(
                    approval_id="ap1", tool="run_shell", summary="rm -rf build", expires_at=expires
                ),
            )
            msg = await asyncio.wait_for(inbox.get(), 120)
            decision = json.loads(msg.data)["decision"]
            await pub(
                "approval_decided",
                ApprovalDecided(
                    approval_id="ap1", decision="approved" if decision == "approve" else "denied"
                ),
            )
            if decision != "approve":
                await pub("failed", RunFailed(reason="approval_denied", message="the user said no"))
                return 1
        if "fail" in config.input:
            await pub("failed", RunFailed(reason="runner_error", message="told to fail"))
            return 1
        await pub(
            "turn", RunTurn(turn=1, model="fake", tokens_in=100, tokens_out=20, cost_usd=0.001)
        )
        await pub(
            "tool_called",
            ToolCalled(turn=1, call_id="c1", tool="read_file", arguments={"path": "README"}),
        )
        await pub(
            "tool_result", ToolResult(turn=1, call_id="c1", tool="read_file", ok=True, output="hi")
        )
        await pub(
            "completed",
            RunCompleted(
                tokens_in=100,
                tokens_out=20,
                cost_usd=0.001,
                result=RunResult(summary="fake run done", diff_stat=" README | 1 +", turns=1),
            ),
        )
        return 0
    finally:
        for subject in followed:
            await subject.stop()
        await bus.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config")
    source.add_argument("--warm", action="store_true")
    args = parser.parse_args()
    if args.warm:
        handed = _handed_off()
        if handed is None:
            raise SystemExit(0)
        config = handed
    else:
        config = RunConfig.model_validate_json(Path(args.config).read_text())
    raise SystemExit(asyncio.run(main(config)))
