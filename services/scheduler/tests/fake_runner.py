"""A stand-in for ``python -m nexus_runner --config FILE`` driven by FAKE_RUNNER_MODE.

Modes: ``exit0`` (print and exit), ``environ`` (write its /proc/self/environ to
environ.json in its working directory, then exit),
``sleep`` (run until SIGTERM), ``ignore-term`` (survive
SIGTERM until SIGKILL), ``spawn-child`` (start a grandchild in the group, then sleep),
``spawn-tool`` (start a tool as the runner does, in a process group of its own within the
runner's session, that itself leaves a background child, then sleep).
Prints ``ready`` once signal handlers are in place.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def main() -> None:
    path = sys.argv[sys.argv.index("--config") + 1]
    with open(path) as fh:
        config = json.load(fh)
    mode = os.environ.get("FAKE_RUNNER_MODE", "sleep")
    print(f"run {config['run_id']} agent {config['agent_id']}", flush=True)
    if mode == "exit0":
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
