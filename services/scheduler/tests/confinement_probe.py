"""Run inside a sandbox by the confinement tests: tries what it is told, prints a JSON report.

Arguments: ``read=PATH`` (read a file), ``write=PATH`` (create one), ``connect=HOST:PORT``
(the first bytes the server sends after an HTTP request line: NATS greets with INFO, HTTP
answers with a status line). The report also lists the environment.
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
report["env"] = dict(os.environ)
print(json.dumps(report))
