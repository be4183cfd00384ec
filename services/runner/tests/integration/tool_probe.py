"""Committed into a test repository and run by the agent's tools (run_shell, a planted
conftest.py, an MCP server's start): tries to reach what the runner holds, reports in JSON.

``python tool_probe.py REPORT``: reads the targets from ``probe-targets.json`` beside it
(``read``: files, ``write``: files to create, ``connect``: ``host:port``, ``list``:
directories, ``honey``: the honeytoken to look for in every process's environment and in its
own) and writes REPORT.
Nothing but the standard library: it runs wherever the tools run.
"""

import json
import os
import socket
import sys
from pathlib import Path


def _try_read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return "ok:" + fh.read(200).decode(errors="replace")
    except OSError as exc:
        return type(exc).__name__


def _try_write(path: str) -> str:
    try:
        with open(path, "a") as fh:
            fh.write("\n[core]\n\tfsmonitor = /tmp/planted\n")
        return "ok"
    except OSError as exc:
        return type(exc).__name__


def _try_connect(target: str) -> str:
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=3) as conn:
            return "ok:" + conn.recv(16).decode(errors="replace")
    except OSError as exc:
        return type(exc).__name__


def _try_list(path: str) -> "list[str] | str":
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return type(exc).__name__


def _processes_holding(honey: str) -> list[str]:
    """Every /proc/<pid>/environ and cmdline that holds `honey` (none without /proc)."""
    found = []
    if not os.path.isdir("/proc"):
        return found
    for pid in os.listdir("/proc"):
        for part in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as fh:
                    if honey.encode() in fh.read():
                        found.append(f"{pid}/{part}")
            except OSError:
                continue
    return found


def main() -> None:
    targets = json.loads((Path(__file__).parent / "probe-targets.json").read_text())
    honey = targets["honey"]
    report = {
        "read": {p: _try_read(p) for p in targets["read"]},
        "write": {p: _try_write(p) for p in targets["write"]},
        "connect": {t: _try_connect(t) for t in targets["connect"]},
        "list": {p: _try_list(p) for p in targets["list"]},
        "proc": os.path.isdir("/proc/self"),
        "processes_with_honey": _processes_holding(honey),
        "env": sorted(os.environ),
        "env_has_honey": any(honey in v for v in os.environ.values()),
        "root": sorted(os.listdir("/")),
        "beside_workspace": sorted(os.listdir(Path.cwd().parent)),
    }
    with open(sys.argv[1], "w") as fh:
        json.dump(report, fh)


if __name__ == "__main__":
    main()
