"""`nexus doctor`: NATS, streams and consumer lag, PostgreSQL, each service, config sanity."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import asdict, dataclass
from typing import Any, Literal

import asyncpg
import nats.errors
import nats.js.errors
import typer
from nexus_events.contract.streams import DLQ, LOGS, drift, stream_configs
from nexus_events.errors import BusUnavailable
from nexus_events.transport.bus import Bus

from nexus_cli.devstack import probes
from nexus_cli.devstack.nats_auth import redacted
from nexus_cli.devstack.state import read_state
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Globals, Output, OutputOpt, globals_of, run
from nexus_cli.output import emit
from nexus_cli.target import Target, resolve_target

Level = Literal["ok", "warn", "fail"]
# Pending messages on a consumer above which doctor warns about lag.
LAG_WARN = 1000
# Streams no durable consumer reads by design, and who reads them instead: doctor names them
# without a warning. Any other stream without one keeps invalid messages unreported.
UNREAD_BY_DESIGN = {
    DLQ: "the dead-letter sink itself, read by `nexus dlq`",
    LOGS: "runners' log lines, read live by `nexus logs` and `attach`",
}


@dataclass
class Check:
    name: str
    level: Level
    detail: str


async def _nats_checks(bus: Bus, checks: list[Check]) -> None:
    for wanted in stream_configs():
        name = wanted.name or "?"
        try:
            info = await bus.js.stream_info(name)
        except nats.js.errors.NotFoundError:
            checks.append(Check(f"stream {name}", "fail", "missing (services ensure it at start)"))
            continue
        diff = drift(info.config, wanted)
        try:
            consumers = await bus.js.consumers_info(name)
        except nats.js.errors.Error:
            consumers = None
        durables = [c for c in consumers or [] if c.config.durable_name]
        level: Level = "warn" if diff else "ok"
        detail = f"{info.state.messages} msgs, last seq {info.state.last_seq}" + (
            f"; drifted: {', '.join(diff)}" if diff else ""
        )
        if consumers is not None and not durables:
            if name in UNREAD_BY_DESIGN:
                detail += f"; no durable reader ({UNREAD_BY_DESIGN[name]})"
            else:
                # Its reader's service is not deployed (or not up yet): poison stays unseen.
                level = "warn"
                detail += (
                    "; no durable reader: a message here that does not decode is stored and"
                    " never dead-lettered"
                )
        checks.append(Check(f"stream {name}", level, detail))
        for c in durables:
            lag = c.num_pending or 0
            checks.append(
                Check(
                    f"  consumer {c.config.durable_name}",
                    "warn" if lag > LAG_WARN else "ok",
                    f"pending {lag}, unacked {c.num_ack_pending or 0},"
                    f" redelivered {c.num_redelivered or 0}",
                )
            )
    try:
        await bus.nc.request("$SRV.PING.nexus-core", b"", timeout=2)
        checks.append(Check("core", "ok", "nexus-core answers $SRV.PING"))
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        checks.append(Check("core", "fail", "no nexus-core service answers"))
    leader = await probes.scheduler_leader(bus.js)
    checks.append(
        Check("scheduler", "ok", f"leader {leader}")
        if leader
        else Check("scheduler", "fail", "no scheduler holds the lease")
    )


async def _pg_check(target: Target) -> Check:
    if not target.database_url:
        return Check("postgresql", "warn", "no database in this context (NEXUS_DATABASE_URL)")
    try:
        conn = await asyncpg.connect(target.database_url, timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        return Check("postgresql", "fail", f"cannot connect: {exc}")
    try:
        version = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    return Check("postgresql", "ok", f"PostgreSQL {version}")


def _confinement_check() -> Check | None:
    """Whether local runners started here would be confined by bubblewrap, and why not."""
    if os.environ.get("NEXUS_RUNTIME", "local") != "local":
        return None
    if importlib.util.find_spec("nexus_scheduler") is None:
        return None
    from nexus_scheduler.runtime.confinement import MODES, decide

    given = os.environ.get("NEXUS_CONFINEMENT") or os.environ.get(
        "NEXUS_SCHEDULER_CONFINEMENT", "auto"
    )
    mode = MODES.get(given)
    if mode is None:
        return Check("confinement", "fail", f"NEXUS_CONFINEMENT={given!r}: use auto, on or off")
    decision = decide(mode)
    if decision.enabled:
        return Check("confinement", "ok", f"local runs confined: {decision.reason}")
    level: Level = "fail" if mode == "on" else "warn"
    return Check("confinement", level, f"local runs NOT confined: {decision.reason}")


def _config_checks(target: Target) -> list[Check]:
    checks = []
    if importlib.util.find_spec("nexus_runner") is None:
        checks.append(
            Check("runner", "warn", "nexus_runner is not installed: local runs cannot start")
        )
    else:
        checks.append(Check("runner", "ok", "nexus_runner importable"))
    confinement = _confinement_check()
    if confinement is not None:
        checks.append(confinement)
    state = read_state(target.dev_home) if target.dev_home is not None else None
    model_vars = ("NEXUS_LLM_BASE_URL", "NEXUS_RUNNER_LLM_BASE_URL", "OPENAI_API_KEY")
    if state is not None and "model" in state.services:
        checks.append(Check("model", "ok", f"offline scripted model at {state.model_url}"))
    elif not any(os.environ.get(v) for v in model_vars):
        checks.append(
            Check(
                "model",
                "warn",
                "no NEXUS_LLM_BASE_URL/OPENAI_API_KEY:"
                " agents need a model base_url (or `nexus dev up --offline-model`)",
            )
        )
    if state is not None:
        restarted = {n: e.restarts for n, e in state.services.items() if e.restarts}
        checks.append(
            Check(
                "dev stack",
                "warn" if restarted else "ok",
                f"{state.status} in {state.home}"
                + (
                    f"; restarts: {', '.join(f'{n}={r}' for n, r in restarted.items())}"
                    if restarted
                    else ""
                ),
            )
        )
    return checks


async def diagnose(g: Globals) -> tuple[Target | None, list[Check]]:
    checks: list[Check] = []
    try:
        target = resolve_target(g)
    except CliError as exc:
        return None, [
            Check("context", "fail", exc.message + (f" ({exc.hint})" if exc.hint else ""))
        ]
    checks.append(Check("context", "ok", f"{target.context}: {target.shown_url}"))
    try:
        bus = await Bus.connect(target.bus_settings(connect_attempts=1), source="cli")
    except BusUnavailable as exc:
        checks.append(Check("nats", "fail", redacted(str(exc))))
    else:
        try:
            checks.append(
                Check(
                    "nats",
                    "ok",
                    f"connected to {target.shown_url}",
                )
            )
            await _nats_checks(bus, checks)
        finally:
            await bus.close()
    checks.append(await _pg_check(target))
    checks.extend(_config_checks(target))
    return target, checks


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor_cmd(ctx: typer.Context, output: OutputOpt = Output.TABLE) -> None:
        """Check everything a run needs; exit 4 if anything failed."""
        g = globals_of(ctx)

        async def body() -> None:
            _, checks = await diagnose(g)
            marks = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}
            data: dict[str, Any] = {
                "checks": [asdict(c) for c in checks],
                "ok": not any(c.level == "fail" for c in checks),
            }
            emit(
                output,
                data,
                ("CHECK", "", "DETAIL"),
                [
                    (c.name, marks[c.level] if output is Output.TABLE else c.level, c.detail)
                    for c in checks
                ],
            )
            if not data["ok"]:
                raise typer.Exit(int(ExitCode.UNAVAILABLE))

        run(output, body)
