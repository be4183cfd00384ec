"""A stand-in for ``python -m nexus_runner --config FILE`` driven by FAKE_RUNNER_MODE.

Modes: ``exit0`` (print and exit), ``environ`` (write its /proc/self/environ to
environ.json in its working directory, then exit),
``sleep`` (run until SIGTERM), ``ignore-term`` (survive
SIGTERM until SIGKILL), ``spawn-child`` (start a grandchild in the group, then sleep),
``spawn-tool`` (start a tool as the runner does, in a process group of its own within the
runner's session, that itself leaves a background child, then sleep).
``isolation`` (write report.json in its working directory: its pid, cwd, HOME, workspace and
what it sees in them and in the roots above, its environment, whether stdin is /dev/null;
then leave a marker of its run in its HOME, workspace and /tmp, and exit).
Prints ``ready`` once signal handlers are in place.

With ``--warm`` (a warm runner, docs/warm-starts.md) it prints ``warm``, reads a WarmHandoff
line from stdin (EOF: exit 0), sets its env and goes on as with ``--config``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def _handoff() -> tuple[dict[str, object], str | None]:
    print("warm", flush=True)
    line = sys.stdin.buffer.readline()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    if not line.strip():
        sys.exit(0)
    handoff = json.loads(line)
    os.environ.update(handoff["env"])
    return handoff["config"], handoff["workspace"]


def _isolation(config: dict[str, object], workspace: str | None) -> None:
    root = os.environ.get("NEXUS_WORKSPACE_ROOT", "/tmp/nexus-runs")
    ws = workspace or os.path.join(root, str(config["run_id"]))
    os.makedirs(ws, exist_ok=True)
    home = os.environ["HOME"]

    def listing(path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError as exc:
            return [type(exc).__name__]

    report = {
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "home": home,
        "workspace": ws,
        "home_files": listing(home),
        "workspace_files": listing(ws),
        "workspace_root": listing(root),
        "tmp": listing("/tmp"),
        "env": dict(os.environ),
        "stdin": os.path.realpath("/proc/self/fd/0"),
    }
    with open("report.json", "w") as fh:
        json.dump(report, fh)
    for where in (home, ws, "/tmp"):
        with open(os.path.join(where, f"marker-{config['run_id']}"), "w") as fh:
            fh.write("left by the previous run")


def main() -> None:
    workspace = None
    if "--warm" in sys.argv:
        config, workspace = _handoff()
    else:
        path = sys.argv[sys.argv.index("--config") + 1]
        with open(path) as fh:
            config = json.load(fh)
    mode = os.environ.get("FAKE_RUNNER_MODE", "sleep")
    print(f"run {config['run_id']} agent {config['agent_id']}", flush=True)
    if mode == "exit0":
        print("done", flush=True)
        return
    if mode == "isolation":
        _isolation(config, workspace)
        print("done", flush=True)
        return
    if mode == "environ":  # what the kernel says this process was started with
        with open("/proc/self/environ", "rb") as fh:
            pairs = [p.decode().split("=", 1) for p in fh.read().split(b"\0") if p]
        with open("environ.json", "w") as fh:
            json.dump(dict(pairs), fh)
        print("done", flush=True)
        return
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))
    if mode == "spawn-child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"child {child.pid}", flush=True)
    if mode == "spawn-tool":
        tool = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300"], process_group=0)
        print(f"tool {tool.pid}", flush=True)
    print("ready", flush=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
