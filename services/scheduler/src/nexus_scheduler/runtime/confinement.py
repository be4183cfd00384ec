"""Local runners confined by bubblewrap: the command line that starts one, and whether it can.

What a confined runner gets (`Confinement.wrap`):

- the host read-only (``--ro-bind / /``), with a private, empty ``/tmp``, ``/var/tmp``, the
  scheduler user's home and the roots of workspaces and run dirs (other runs) hidden (tmpfs);
  what the runner itself needs from under them (its Python's prefixes and import path, never
  the scheduler's cwd, the stack home; its run dir; the agent's stdio MCP server commands) is
  bound back read-only.
  Writable: its workspace (and its tools' HOME beside it), its ``HOME`` (``<run
  dir>/home``) and a local git remote (a path or ``file://`` URL, pushed to). The run dir
  itself stays read-only: the runner cannot rewrite its pid file or config;
- new PID, IPC, UTS, cgroup and network namespaces (``--unshare-all``), a minimal ``/dev``
  and a ``/proc`` of its own, ``--die-with-parent``, no capabilities but binding low ports in its
  own network namespace (``--cap-drop ALL --cap-add CAP_NET_BIND_SERVICE``: a scheduler
  running as root would otherwise hand all of root's on) and starting the tools' nested
  sandbox (``CAP_SETFCAP``, see `_BASE_ARGS`), and no new privileges. The agent's commands
  run in that second sandbox (nexus_runner.tool_sandbox), which sees none of the runner's
  files, network or processes: the local git remote bound writable here is not in it;
- the environment `runner_env` built, nothing more: it is the process environment bwrap is
  started with (not ``--setenv`` arguments, which every user could read in ``ps``);
- no network but its allowed endpoints: NATS, the model, the git remote (and the GitHub API
  with a token), the OTLP collector. The network namespace has only loopback; `netrelay`
  relays each allowed ``host:port`` through a unix socket, and the sandbox's ``/etc/hosts``
  points each allowed host name at the loopback address its relay listens on. Any other
  address, a port on the host's 127.0.0.1 included, is unreachable: it is not the host's
  loopback. An endpoint given as a non-loopback IP address cannot be relayed transparently
  (TLS and the URL name it); it is left out with a warning (name it by host name).

`resolve` turns the setting (``NEXUS_CONFINEMENT=auto|on|off``) into a decision at start-up:
``auto`` confines when bwrap works here, ``on`` refuses to run unconfined, ``off`` warns.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from nexus_events.events import RunConfig
from nexus_events.runtime import netrelay
from nexus_events.runtime.program_paths import install_prefix, named_files, shebang_interpreter

log = logging.getLogger(__name__)

Mode = Literal["auto", "on", "off"]
MODES: dict[str, Mode] = {"auto": "auto", "on": "on", "off": "off"}
# The relays run by path (stdlib only, `python -I -S`); the runner runs the same script in
# the tools' sandbox (nexus_runner.egress), hence its home in the contract library.
RELAY_SCRIPT = Path(netrelay.__file__)
# Inside the sandbox: where the relays' unix sockets appear (short: a socket path is < 108).
NET_MOUNT = "/tmp/.nexus-net"  # noqa: S108 - inside the sandbox's private /tmp
# Host names get loopback addresses from here on (127.0.0.1 stays what it is).
_ALIAS_BASE = int(ipaddress.IPv4Address("127.0.1.1"))
_DEFAULT_PORTS = {"nats": 4222, "tls": 4222, "http": 80, "https": 443, "ssh": 22, "git": 9418}
_PROBE_TIMEOUT = 10.0
# The runner's default PATH of stdio MCP servers (nexus_runner.config.RunnerSettings.mcp_path).
_MCP_PATH = "/usr/local/bin:/usr/bin:/bin"


class ConfinementUnavailableError(RuntimeError):
    """NEXUS_CONFINEMENT=on, and runners cannot be confined here."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @classmethod
    def from_url(cls, url: str, default_scheme: str = "https") -> Endpoint | None:
        url = url.strip()
        if not url:
            return None
        parts = urlsplit(url if "://" in url else f"{default_scheme}://{url}")
        if not parts.hostname:
            return None
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 443)
        return cls(parts.hostname, port)


@dataclass(frozen=True)
class Decision:
    """Whether runners are confined, and why (for the start-up log and `nexus doctor`)."""

    enabled: bool
    reason: str
    bwrap: str | None = None


# Run in the probe sandbox: the inner relay must be able to listen on a port below 1024.
_BIND_CHECK = "import socket; socket.socket().bind(('127.0.0.1', 443))"


def probe(bwrap: str, python: str = sys.executable) -> str | None:
    """None when `bwrap` can build the sandbox runners get here, else why not."""
    argv = [bwrap, *_BASE_ARGS, *_interpreter_binds(python), "--", python, "-I", "-S"]
    argv += ["-c", _BIND_CHECK]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} does not run: {exc}"
    why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    if done.returncode != 0 and "PermissionError" in why:
        return (
            f"the sandbox cannot listen on ports below 1024 ({why}), which the relays of"
            " https/ssh endpoints need: CAP_NET_BIND_SERVICE is not honoured here"
        )
    if done.returncode != 0 and "execvp" in why:
        return f"the sandbox cannot start the interpreter {python} ({why})"
    if done.returncode != 0:
        return (
            f"bwrap cannot create the namespaces ({why}); user namespaces may be off"
            " (sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces) or blocked"
            " by the container's seccomp/AppArmor profile"
        )
    return None


def _interpreter_binds(python: str) -> list[str]:
    """The interpreter's prefixes the probe sandbox hides (a checkout under /tmp), bound back
    read-only as `Confinement.wrap` binds them for a runner."""
    exe = Path(python)
    prefixes = {exe.parent.parent, exe.resolve().parent.parent}
    prefixes |= {Path(sys.prefix), Path(sys.base_prefix)}
    args: list[str] = []
    shown: list[Path] = []
    for path in sorted(prefixes, key=lambda p: len(p.parts)):
        if _under(path, [Path("/tmp")]) and not _under(path, shown) and path.exists():  # noqa: S108
            shown.append(path)
            args += ["--ro-bind", str(path), str(path)]
    return args


def decide(
    mode: Mode,
    *,
    which: Callable[[str], str | None] = shutil.which,
    check: Callable[[str], str | None] = probe,
    platform: str = sys.platform,
) -> Decision:
    """Whether runners are confined under `mode` here, and why (pure but for the probe)."""
    if mode == "off":
        return Decision(False, "turned off (NEXUS_CONFINEMENT=off)")
    bwrap = which("bwrap")
    if not platform.startswith("linux"):
        why: str | None = "bubblewrap needs Linux"
    elif bwrap is None:
        why = "bwrap is not installed (apt-get install bubblewrap)"
    else:
        why = check(bwrap)
    if why is None and bwrap is not None:
        return Decision(True, f"bubblewrap ({bwrap}), NEXUS_CONFINEMENT={mode}", bwrap)
    return Decision(False, f"unavailable: {why}")


def resolve(mode: Mode, decision: Decision | None = None) -> Decision:
    """`decide` (or `decision`) at start-up: raises `ConfinementUnavailableError` for ``on`` when
    runners cannot be confined; logs what runners get either way (a warning unconfined)."""
    decision = decision or decide(mode)
    if decision.enabled:
        log.info("local runners are confined: %s", decision.reason)
        return decision
    if mode == "on":
        raise ConfinementUnavailableError(f"NEXUS_CONFINEMENT=on but {decision.reason}")
    log.warning(
        "local runners are NOT confined (%s): they run as this user, with its files and network",
        decision.reason,
    )
    return decision


# The namespaces and mounts every sandbox starts from (the probe checks exactly these).
_BASE_ARGS = (
    "--unshare-all",
    "--die-with-parent",
    # Started by root, bwrap would keep root's capabilities (remounts could undo the rest).
    # One is kept: the inner relay listens on the endpoints' own ports, 443 and 22 among
    # them, in the sandbox's private network namespace (binding there reaches nothing else).
    "--cap-drop", "ALL",
    "--cap-add", "CAP_NET_BIND_SERVICE",
    # The runner starts its tools' own sandbox (nexus_runner.tool_sandbox), a nested bwrap:
    # as root without capabilities it must map uid 0 into a new user namespace, which since
    # Linux 5.12 needs CAP_SETFCAP. Harmless here: bwrap sets no_new_privs (file
    # capabilities are ignored at exec) and the bounding set stays these two.
    "--cap-add", "CAP_SETFCAP",
    "--ro-bind", "/", "/",
    "--dev", "/dev",
    "--proc", "/proc",
    "--tmpfs", "/tmp",  # noqa: S108 - the sandbox's own, empty /tmp
)  # fmt: skip


def runner_endpoints(config: RunConfig, env: Mapping[str, str]) -> list[Endpoint]:
    """Where a runner may connect: NATS, the model, the git remote (and the GitHub API when
    it has a token), the OTLP collector; deduplicated, in that order."""
    urls: list[tuple[str, str]] = [
        (u, "nats") for u in env.get("NEXUS_NATS_URL", "nats://127.0.0.1:4222").split(",")
    ]
    llm = (
        config.model.base_url
        or env.get("NEXUS_LLM_BASE_URL")
        or env.get("NEXUS_RUNNER_LLM_BASE_URL")
        or "https://api.openai.com/v1"
    )
    urls.append((llm, "https"))
    if config.repo is not None and _local_remote(config.repo.url) is None:
        urls.append((_git_url(config.repo.url), "https"))
    if env.get("NEXUS_GITHUB_TOKEN") or env.get("NEXUS_RUNNER_GITHUB_TOKEN"):
        urls.append((env.get("NEXUS_GITHUB_API_URL", "https://api.github.com"), "https"))
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        if env.get(name):
            urls.append((env[name], "http"))
    found: list[Endpoint] = []
    for url, scheme in urls:
        endpoint = Endpoint.from_url(url, scheme)
        if endpoint is not None and endpoint not in found:
            found.append(endpoint)
    found += [e for e in _egress_endpoints(config) if e not in found]
    return found


def _egress_endpoints(config: RunConfig) -> list[Endpoint]:
    """Where the run's egress proxy (inside the runner's sandbox) connects for its tools: each
    exact host of a grant, on its port (80 and 443 without one). A wildcard names no host a
    relay can be set up for: its requests find nothing (warned once, at the run's start)."""
    found: list[Endpoint] = []
    for grant in config.egress:
        if grant.wildcard:
            log.warning(
                "run %s: egress grant %s cannot be relayed out of a confined runner (a"
                " wildcard); name the hosts",
                config.run_id,
                grant.host,
            )
            continue
        ports = [grant.port] if grant.port is not None else [80, 443]
        found += [Endpoint(grant.host, p) for p in ports]
    return found


def _git_url(url: str) -> str:
    """An scp-like ``user@host:path`` as an ssh URL (its port is 22)."""
    if "://" not in url and ":" in url.split("/", 1)[0]:
        return "ssh://" + url.split(":", 1)[0]
    return url


def _local_remote(url: str) -> Path | None:
    if url.startswith("file://"):
        return Path(urlsplit(url).path)
    if url.startswith("/"):
        return Path(url)
    return None


@dataclass(frozen=True)
class _Route:
    name: str
    endpoint: Endpoint
    address: str  # where the runner dials it, inside the sandbox


def _routes(endpoints: Iterable[Endpoint]) -> tuple[list[_Route], dict[str, str]]:
    """Each endpoint's loopback address inside the sandbox, and the host names to map."""
    routes: list[_Route] = []
    names: dict[str, str] = {}
    for endpoint in endpoints:
        host = endpoint.host
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            if host == "localhost":
                address = "127.0.0.1"
            else:
                address = names.setdefault(
                    host, str(ipaddress.IPv4Address(_ALIAS_BASE + len(names)))
                )
        else:
            if not ip.is_loopback:
                log.warning(
                    "confined runners cannot reach %s:%d: an IP address other than loopback"
                    " cannot be relayed transparently; name it by host name",
                    host,
                    endpoint.port,
                )
                continue
            address = str(ip)
        if any((r.address, r.endpoint.port) == (address, endpoint.port) for r in routes):
            continue  # localhost:4222 beside 127.0.0.1:4222: one listener serves both
        routes.append(_Route(f"e{len(routes)}", endpoint, address))
    return routes, names


def _hosts_file(names: Mapping[str, str]) -> str:
    lines = ["127.0.0.1\tlocalhost", *(f"{addr}\t{host}" for host, addr in names.items())]
    return "\n".join(lines) + "\n"


def _hidden() -> list[Path]:
    """Host directories replaced by an empty tmpfs: the private /tmp, /var/tmp (the other
    world-writable scratch, where anything may lie), the user's home."""
    hidden = [Path("/tmp")]  # noqa: S108
    if Path("/var/tmp").is_dir():  # noqa: S108
        hidden.append(Path("/var/tmp"))  # noqa: S108
    home = Path(os.path.expanduser("~"))
    if home.is_absolute() and home != Path("/") and home.is_dir():
        hidden.append(home)
    return hidden


def _under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def runner_import_paths(
    prefixes: Iterable[str] | None = None,
    import_path: Iterable[str] | None = None,
    cwd: Path | None = None,
) -> tuple[Path, ...]:
    """What the runner must read to start: the interpreter's prefixes and the import path
    (site-packages, and the source dirs editable installs point at), never ``''``, the cwd
    nor any of its parents: a scheduler's cwd is the stack home, whose run dirs hold every
    run's config."""
    here = (cwd or Path.cwd()).resolve()
    found: list[Path] = []
    prefixes = (sys.prefix, sys.base_prefix) if prefixes is None else prefixes
    import_path = sys.path if import_path is None else import_path
    for entry in (*prefixes, *import_path):
        if not entry or not Path(entry).is_absolute() or not Path(entry).exists():
            continue
        path = Path(entry).resolve()
        if path == here or path in here.parents or path == Path("/"):
            continue
        if path not in found:
            found.append(path)
    return tuple(found)


def command_paths(command: str, path_var: str) -> list[Path]:
    """Where the program `command` (found on `path_var` unless absolute) lives: its
    directory, and for a symlink (``uv tool``, pipx) or a script, the installation prefix
    of its target and of the interpreter its ``#!`` line names."""
    exe = shutil.which(command, path=path_var) if "/" not in command else command
    if exe is None or not Path(exe).exists():
        return []
    found = [Path(exe).parent]
    for program in (Path(exe), shebang_interpreter(Path(exe))):
        if program is None:
            continue
        real = program.resolve()
        if program.is_symlink() or program != Path(exe):
            found.append(install_prefix(real))
    return found


@dataclass(frozen=True)
class Confinement:
    """Builds the command line of a confined runner (see the module's doc)."""

    bwrap: str
    python: str = sys.executable
    # Host paths the runner must read even under a hidden directory (its interpreter and
    # packages); default: the interpreter's prefixes and import path.
    readable: tuple[Path, ...] = field(default_factory=runner_import_paths)

    def wrap(
        self,
        command: Sequence[str],
        *,
        run_dir: Path,
        writable: Sequence[Path],
        endpoints: Sequence[Endpoint],
        readable: Sequence[Path] = (),
        hide: Sequence[Path] = (),
    ) -> list[str]:
        """`command` as a confined process: outer relay -> bwrap -> inner relay -> command.
        `hide`: more directories replaced by an empty tmpfs (what `writable` and `readable`
        name under them is bound again). Makes the writable paths, the net dir and the
        sandbox's hosts file in `run_dir`."""
        run_dir = run_dir.resolve()
        routes, names = _routes(endpoints)
        net_dir = run_dir / "net"
        net_dir.mkdir(mode=0o700, exist_ok=True)
        hosts = run_dir / "hosts"
        hosts.write_text(_hosts_file(names))
        hidden = _hidden()
        hidden += [p for p in hide if p.is_absolute() and p != Path("/") and p not in hidden]
        args: list[str] = [self.bwrap, *_BASE_ARGS]
        for path in hidden[1:]:  # /tmp is in the base
            args += ["--tmpfs", str(path)]
        # Readable again under the hidden directories: the interpreter, then the run dir.
        shown: list[Path] = []
        mine = (*self.readable, *readable)
        wanted = {*mine, *(p.resolve() for p in mine), run_dir}
        for path in sorted(wanted, key=lambda p: len(p.parts)):  # a parent covers its children
            # Never a hidden directory itself (a scheduler started in ~ has it on sys.path).
            if path not in hidden and _under(path, hidden) and not _under(path, shown):
                shown.append(path)
                args += ["--ro-bind", str(path), str(path)]
        for path in writable:
            path.mkdir(parents=True, exist_ok=True)
            args += ["--bind", str(path), str(path)]
        args += ["--ro-bind", str(net_dir), NET_MOUNT, "--ro-bind", str(hosts), "/etc/hosts"]
        args += ["--chdir", str(run_dir)]  # the cwd an unconfined runner has
        relay = [self.python, "-I", "-S", str(RELAY_SCRIPT)]
        outer = [f"{r.name}={_join(r.endpoint.host, r.endpoint.port)}" for r in routes]
        inner = [f"{r.name}={_join(r.address, r.endpoint.port)}" for r in routes]
        return [
            *relay, "outer", str(net_dir), *outer, "--",
            *args, "--",
            *relay, "inner", NET_MOUNT, *inner, "--",
            *command,
        ]  # fmt: skip

    def shape(self, command: Sequence[str], config: RunConfig, env: Mapping[str, str]) -> RunShape:
        """What of `config` (and the runner's `env`) a run's sandbox is built from: its
        endpoints, what it must read, a local git remote it pushes to. Two runs of one shape
        get the same sandbox but for their own workspace and run dir (docs/warm-starts.md)."""
        writable: list[Path] = []
        remote = _local_remote(config.repo.url) if config.repo is not None else None
        if remote is not None and remote.exists():
            writable.append(remote)
        # A command found on the runner's PATH (``python``) may live in a hidden home's venv.
        exe = shutil.which(command[0], path=env.get("PATH")) if command else None
        readable = [Path(exe).resolve().parent.parent] if exe else []
        # A script the runner command names by absolute path (``python /opt/runner.py``):
        # the operator's NEXUS_LOCAL_COMMAND names it, as it names the interpreter.
        readable += named_files(command[1:])
        # The agent's stdio MCP servers, wherever installed (a hidden ~/.local/bin, /tmp):
        # read-only, so they start (in the tools' sandbox, which binds them again).
        mcp_path = env.get("NEXUS_MCP_PATH") or env.get("NEXUS_RUNNER_MCP_PATH") or _MCP_PATH
        for spec in config.mcp_servers:
            if spec.transport == "stdio" and spec.command:
                readable += command_paths(spec.command, mcp_path)
                # A script it names by absolute path (``python /opt/srv.py``), as the tools'
                # sandbox binds it.
                readable += named_files(spec.args)
        # The operator's allowlist of the tools' sandbox: the tools see it only if the runner
        # does.
        readable += _tool_allowlist(env)
        return RunShape(
            endpoints=tuple(runner_endpoints(config, env)),
            readable=tuple(dict.fromkeys(readable)),
            writable=tuple(writable),
        )

    def wrap_shaped(
        self,
        command: Sequence[str],
        shape: RunShape,
        env: Mapping[str, str],
        *,
        run_dir: Path,
        workspace: Path,
    ) -> list[str]:
        """`wrap` for a runner of `shape` whose workspace is `workspace`: it, the tools'
        ``HOME`` beside it and the runner's ``HOME`` writable."""
        # The runner's tools get a HOME beside the workspace (nexus_runner.dependencies.tool_home).
        tool_home = workspace.with_name(f"{workspace.name}.home")
        return self.wrap(
            command,
            run_dir=run_dir,
            writable=[workspace, tool_home, Path(env["HOME"]), *shape.writable],
            endpoints=shape.endpoints,
            readable=shape.readable,
            # Other runs: their workspaces and run dirs, wherever the roots are.
            hide=[workspace.parent.resolve(), run_dir.resolve().parent],
        )

    def wrap_run(
        self, command: Sequence[str], config: RunConfig, env: Mapping[str, str], run_dir: Path
    ) -> list[str]:
        """`wrap` for a run: its workspace and ``HOME`` writable (and a local git remote),
        its endpoints from `config` and the runner's `env`."""
        return self.wrap_shaped(
            command,
            self.shape(command, config, env),
            env,
            run_dir=run_dir,
            workspace=workspace_root(env) / config.run_id,
        )


@dataclass(frozen=True)
class RunShape:
    """The config-derived inputs of a run's sandbox (`Confinement.shape`); unconfined runs
    all have the empty one. A warm runner serves only a run of its own shape: never a wider
    sandbox than the run needs, nor a narrower one."""

    endpoints: tuple[Endpoint, ...] = ()
    readable: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()  # a local git remote


UNCONFINED = RunShape()


def workspace_root(env: Mapping[str, str]) -> Path:
    """Where the runner started with `env` makes workspaces (its NEXUS_WORKSPACE_ROOT)."""
    root = env.get("NEXUS_WORKSPACE_ROOT") or env.get("NEXUS_RUNNER_WORKSPACE_ROOT")
    return Path(root or "/tmp/nexus-runs")  # noqa: S108 - the runner's default


def _tool_allowlist(env: Mapping[str, str]) -> list[Path]:
    """NEXUS_TOOL_SANDBOX_READABLE of the runner's environment (a JSON list of paths); a
    malformed value binds nothing (the runner's own settings refuse it at its start)."""
    raw = env.get("NEXUS_TOOL_SANDBOX_READABLE") or env.get("NEXUS_RUNNER_TOOL_SANDBOX_READABLE")
    try:
        paths = json.loads(raw) if raw else []
    except ValueError:
        return []
    if not isinstance(paths, list):
        return []
    return [Path(p) for p in paths if isinstance(p, str) and p.startswith("/") and Path(p).exists()]


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
