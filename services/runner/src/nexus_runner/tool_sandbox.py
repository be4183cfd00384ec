"""The tools' own bubblewrap sandbox: what the agent makes run (run_shell, run_tests, the
acceptance command, MCP stdio servers) runs apart from the runner.

The runner keeps NATS, the model, git and its credentials; a command of the agent gets, per
command, a second sandbox (`ToolSandbox.command`):

- its own PID, IPC, UTS, cgroup and network namespaces (``--unshare-all``: only loopback,
  nothing relayed), ``--new-session``, ``--die-with-parent``, no capabilities and no new
  privileges (bwrap always sets ``no_new_privs``);
- a default-deny filesystem: an empty root with only the OS runtime (``/usr`` and the
  ``/bin``, ``/lib*``, ``/sbin`` links or directories as on the host), ``/etc`` read-only with
  the files only root may read withheld (``/etc/shadow``…), the interpreters on the tools'
  ``PATH`` and their prefixes (a venv and its base Python, resolved) and the operator's
  allowlist read-only, the workspace read-write at its own path with its ``.git`` read-only
  and its ``.env``-like files withheld (an empty file bound over each), the tools' home
  read-write, a private empty ``/tmp``, a minimal ``/dev``. Never the project sources, the
  stack home, the run dir, other runs, or a local git remote;
- a ``/proc`` of its own PID namespace when the kernel allows one here (not inside a confined
  runner: see `probe`), else none;
- the environment it is given (`tool_env`), nothing of the runner's.

The process group semantics of `nexus_runner.process` stay: bwrap leads the group, and
killing it kills the sandbox's PID 1 (``--die-with-parent``), which takes every process of
the sandbox's PID namespace with it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from nexus_runner.egress.access import RELAY_SCRIPT, EgressAccess
from nexus_runner.errors import ToolError
from nexus_runner.process import scrubbed_env
from nexus_runner.tool_paths import ETC, etc_withheld, interpreter_paths, secret_files

log = logging.getLogger(__name__)

Mode = Literal["auto", "on", "off"]
# The OS runtime: bound read-only (a directory) or recreated (a symlink, /bin -> usr/bin).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Variables a tool command keeps from the runner's environment (plus LC_*); HOME, TMPDIR
# and the two below are the sandbox's own. Nothing else: no API key, token or NATS setting.
TOOL_ENV_KEYS = ("PATH", "LANG", "TERM", "TZ", "USER")
_PROBE_TIMEOUT = 10.0
# The namespaces and privileges of every tool sandbox (the probe checks exactly these).
_BASE_ARGS = (
    "--unshare-all",
    "--die-with-parent",
    "--new-session",
    "--cap-drop", "ALL",
    "--dev", "/dev",
    "--tmpfs", "/tmp",  # noqa: S108 - the sandbox's own, empty /tmp
)  # fmt: skip


class ToolSandboxUnavailableError(ToolError):
    """NEXUS_TOOL_SANDBOX=on and the tools' sandbox cannot be built here."""


def tool_env(
    parent: Mapping[str, str], home: Path | None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a sandboxed tool command: PATH, the locale, TERM, TZ, USER from
    `parent`, ``HOME`` = `home`, ``TMPDIR=/tmp`` (its private one), and `extra` (an MCP
    server's named variables)."""
    env = {k: v for k, v in parent.items() if k in TOOL_ENV_KEYS or k.startswith("LC_")}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    if home is not None:
        env["HOME"] = str(home)
    env["TMPDIR"] = "/tmp"  # noqa: S108 - the sandbox's private /tmp
    env["GIT_TERMINAL_PROMPT"] = "0"
    # As nexus_runner.process.scrubbed_env: no stale .pyc shadowing a same-second edit.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def _is_ancestor_or_same(path: Path, of: Path) -> bool:
    return path == of or path in of.parents


@functools.cache
def _empty_file() -> Path:
    """An empty read-only file bound over each withheld file of the workspace.

    A regular file, not /dev/null: git (run by the tools) cannot hash a device and
    ``git diff`` would fail whenever a repository tracks a ``.env``; with an empty file it
    shows the file as emptied (the runner redacts the values it tracked from the clone)."""
    fd, name = tempfile.mkstemp(prefix="nexus-withheld-")
    os.close(fd)
    os.chmod(name, 0o444)
    return Path(name)


@dataclass(frozen=True)
class Probe:
    """Whether bwrap builds the tools' sandbox here, with a ``/proc`` or without; why not."""

    works: bool
    with_proc: bool
    why: str = ""


@functools.cache
def probe(bwrap: str) -> Probe:
    """Build the tools' sandbox once here, with a fresh ``/proc`` and without.

    Inside a confined runner the kernel refuses a procfs mount in the nested user namespace
    (the runner's /proc has overmounts, which bwrap's ``--proc`` makes): there the tools get
    no /proc at all, which bash, git and Python do without. Cached: the answer does not
    change while the process lives."""
    base = [bwrap, *_BASE_ARGS, *_system_args()]
    why = ""
    for with_proc in (True, False):
        argv = [*base, *(["--proc", "/proc"] if with_proc else []), "--", "/bin/sh", "-c", ":"]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Probe(works=False, with_proc=False, why=f"{bwrap} does not run: {exc}")
        if done.returncode == 0:
            return Probe(works=True, with_proc=with_proc)
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    return Probe(works=False, with_proc=False, why=f"bwrap cannot build the sandbox ({why})")


def _system_args() -> list[str]:
    """The OS runtime as on the host: directories bound read-only, symlinks recreated."""
    args: list[str] = []
    for name in SYSTEM_PATHS:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    return args


@dataclass(frozen=True)
class ToolSandbox:
    """How the tools' commands are started: in bwrap (`bwrap` set) or as before (None).

    `forbidden`: paths never bound in, nor any ancestor of them (the runner's cwd, its HOME,
    the workspace root); `private`: nothing under them either (the workspace root: the other
    runs). An interpreter prefix or allowlisted path that would reveal one is left out with a
    warning."""

    mode: Mode
    bwrap: str | None
    reason: str
    with_proc: bool = False
    readable: tuple[Path, ...] = ()
    etc_withheld: tuple[Path, ...] = ()
    forbidden: tuple[Path, ...] = ()
    private: tuple[Path, ...] = ()
    # The `.env`-like files of each workspace, found at its first command: they come with the
    # clone (or a checkpoint restore, before any tool), and what the agent makes later it
    # already knows; a walk per command would cost seconds in a large tree (node_modules).
    _secrets: dict[Path, list[Path]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def detect(
        cls,
        mode: Mode,
        *,
        allow: Sequence[Path] = (),
        forbidden: Sequence[Path] = (),
        private: Sequence[Path] = (),
        env: Mapping[str, str] | None = None,
        which: str | None = None,
    ) -> ToolSandbox:
        """Decide once at start-up (probing bwrap) and log what the tools get."""
        env = os.environ if env is None else env
        if mode == "off":
            log.warning("tool commands are NOT sandboxed (NEXUS_TOOL_SANDBOX=off)")
            return cls(mode, None, "turned off (NEXUS_TOOL_SANDBOX=off)")
        bwrap = which or shutil.which("bwrap")
        if not sys.platform.startswith("linux"):
            found = Probe(works=False, with_proc=False, why="bubblewrap needs Linux")
        elif bwrap is None:
            found = Probe(works=False, with_proc=False, why="bwrap is not installed")
        else:
            found = probe(bwrap)
        if not found.works or bwrap is None:
            reason = f"the tools' sandbox is unavailable: {found.why}"
            if mode == "on":
                log.error("%s; tool commands will be refused (NEXUS_TOOL_SANDBOX=on)", reason)
            else:
                log.warning("%s; tool commands run in the runner's own sandbox", reason)
            return cls(mode, None, reason)
        paths = interpreter_paths(env.get("PATH", ""), (sys.prefix, sys.base_prefix))
        sandbox = cls(
            mode,
            bwrap,
            f"bubblewrap ({bwrap}), {'with' if found.with_proc else 'no'} /proc",
            with_proc=found.with_proc,
            etc_withheld=etc_withheld(),
            forbidden=tuple(p.resolve() for p in (*forbidden, *private)),
            private=tuple(p.resolve() for p in private),
        )
        readable = sandbox.allowed([*paths, *allow])
        sandbox = dataclasses.replace(sandbox, readable=tuple(readable))
        log.info("tool commands are sandboxed: %s", sandbox.reason)
        return sandbox

    def allowed(self, paths: Iterable[Path]) -> list[Path]:
        """`paths` that may be bound read-only (existing, not forbidden), deduplicated, a
        parent covering its children."""
        kept: list[Path] = []
        resolved = {p.resolve() for p in paths if p.is_absolute() and p.exists()}
        for path in sorted(resolved, key=lambda p: len(p.parts)):
            if any(path.is_relative_to(s) for s in SYSTEM_PATHS) or path.is_relative_to(ETC):
                continue  # bound whole already
            if any(_is_ancestor_or_same(path, f) for f in self.forbidden) or any(
                path.is_relative_to(p) for p in self.private
            ):
                log.warning("the tools' sandbox leaves out %s: it holds the runner's files", path)
                continue
            if not any(path.is_relative_to(k) for k in kept):
                kept.append(path)
        return kept

    def command(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        home: Path | None,
        cwd: Path,
        readable: Sequence[Path] = (),
        writable: Sequence[Path] = (),
    ) -> list[str]:
        """`argv` as a sandboxed tool command (see the module's doc), or `argv` unchanged when
        the sandbox is off or unavailable under ``auto``.

        Raises `ToolSandboxUnavailableError` under ``on`` when it cannot be built."""
        if self.bwrap is None:
            if self.mode == "on":
                raise ToolSandboxUnavailableError(
                    f"{self.reason}; NEXUS_TOOL_SANDBOX=on, so the command was not run"
                )
            return list(argv)
        workspace = workspace.resolve()
        args = [self.bwrap, *_BASE_ARGS, *_system_args()]
        # Read-only, minus what only root may read: the runner may run as root, and root
        # owns /etc/shadow even without capabilities.
        args += ["--ro-bind", str(ETC), str(ETC)]
        for path in self.etc_withheld:
            if path.is_dir():  # an empty tmpfs of the sandbox's own over it
                args += ["--tmpfs", str(path)]
            else:
                args += ["--ro-bind", "/dev/null", str(path)]
        if self.with_proc:
            args += ["--proc", "/proc"]
        for path in [*self.readable, *self.allowed(readable)]:
            args += ["--ro-bind", str(path), str(path)]
        args += ["--bind", str(workspace), str(workspace)]
        git_dir = workspace / ".git"
        if git_dir.exists() and not git_dir.is_symlink():
            # The runner's own git (git_commit, the push) reads this config and these hooks:
            # the agent may not plant any.
            args += ["--ro-bind", str(git_dir), str(git_dir)]
        if workspace not in self._secrets:
            self._secrets[workspace] = secret_files(workspace)
        for path in self._secrets[workspace]:
            # Still a regular file (not deleted, not swapped for a symlink or directory):
            # bwrap would otherwise create it in the workspace, or fail the command.
            if path.is_file() and not path.is_symlink():
                args += ["--ro-bind", str(_empty_file()), str(path)]
        for path in [*([home] if home is not None else []), *writable]:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            args += ["--bind", str(path), str(path)]
        args += ["--chdir", str(cwd)]
        return [*args, "--", *argv]

    def shell(
        self,
        command: str,
        *,
        workspace: Path,
        home: Path | None,
        cwd: Path,
        egress: EgressAccess | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        """(argv, environment) of a tool's shell `command` (run_shell, run_tests,
        acceptance): sandboxed with `tool_env`, or as before (``scrubbed_env``) when the
        sandbox is off or unavailable under ``auto``. With `egress` (the run has grants) the
        sandboxed command reaches the network only through the run's proxy: its socket and
        the relay script are bound in, the relay runs beside the command, and the proxy
        variables are set. Raises like `command`."""
        argv: list[str] = ["bash", "-c", command]
        if self.bwrap is None:
            argv = self.command(argv, workspace=workspace, home=home, cwd=cwd)
            return argv, scrubbed_env({"HOME": str(home)} if home else None)
        env = tool_env(os.environ, home)
        readable: list[Path] = []
        if egress is not None:
            argv = [*egress.relay_argv(), *argv]
            readable = [egress.net_dir, RELAY_SCRIPT]
            env |= egress.env()
        argv = self.command(argv, workspace=workspace, home=home, cwd=cwd, readable=readable)
        return argv, env


# What tools run in when no sandbox was decided (unit tests building a bare ToolContext).
UNSANDBOXED = ToolSandbox("off", None, "not configured")
