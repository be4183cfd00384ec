"""Run inside a sandbox by the confinement tests: tries what it is told, reports in JSON.

Arguments: ``read=PATH`` (read a file), ``write=PATH`` (create one), ``connect=HOST:PORT``
(the first bytes the server sends after an HTTP request line: NATS greets with INFO, HTTP
answers with a status line). ``out=PATH``
writes the report there instead of stdout. The report also lists the environment's names,
HOME and the effective capabilities.
"""

import json
import os
import socket
import sys

report: dict[str, object] = {}
for arg in sys.argv[1:]:
    kind, _, target = arg.partition("=")
    try:
        if kind == "read":
            with open(target) as fh:
                report[arg] = "ok:" + fh.read(50)
        elif kind == "out":
            continue
        elif kind == "write":
            with open(target, "w") as fh:
                fh.write("x")
            report[arg] = "ok"
        else:
            host, _, port = target.rpartition(":")
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                conn.sendall(b"GET /v1/models HTTP/1.0\r\nHost: x\r\n\r\n")
                report[arg] = "ok:" + conn.recv(64).decode(errors="replace")
    except OSError as exc:
        report[arg] = type(exc).__name__
try:
    with open("/proc/self/status") as fh:
        report["caps"] = next(line.split()[1] for line in fh if line.startswith("CapEff:"))
except FileNotFoundError:  # the tools' sandbox inside a confined runner has no /proc
    report["caps"] = "no /proc"
report["env"] = sorted(os.environ)  # names: the runner redacts values it holds secret
report["home"] = os.environ.get("HOME", "")
out = [a.partition("=")[2] for a in sys.argv[1:] if a.startswith("out=")]
if out:  # a file: what a tool prints, the runner may redact
    with open(out[0], "w") as fh:
        json.dump(report, fh)
else:
    print(json.dumps(report))
