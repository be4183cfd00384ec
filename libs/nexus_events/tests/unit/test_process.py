"""GC tuning (thresholds sized to projection batches, what tune_gc changes) and run_service."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from nexus_events.runtime.process import (
    DEFAULT_GC_THRESHOLD,
    EXIT_BAD_SETTINGS,
    gc_threshold_for_batch,
    tune_gc,
)


@pytest.fixture
def restored_gc() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_threshold_grows_with_the_batch_above_a_floor():
    assert gc_threshold_for_batch(5_000) == 200_000
    assert gc_threshold_for_batch(10_000) == 400_000
    assert gc_threshold_for_batch(100) == DEFAULT_GC_THRESHOLD


def test_tune_gc_sets_the_young_threshold_and_freezes_startup(restored_gc: None):
    older = gc.get_threshold()[1:]
    tune_gc(123_456)
    assert gc.get_threshold() == (123_456, *older)
    assert gc.get_freeze_count() > 0


def test_tune_gc_zero_leaves_python_alone(restored_gc: None):
    before = gc.get_threshold()
    tune_gc(0)
    assert gc.get_threshold() == before


def test_run_service_drains_on_sigterm_and_logs_json(tmp_path: Path) -> None:
    """A service run by `run_service` is told to stop by SIGTERM, drains, exits 0, and logs
    JSON lines naming the service."""
    marker = tmp_path / "drained"
    code = f"""
import asyncio, logging, pathlib
from nexus_events.runtime.process import run_service

class Probe:
    async def start(self) -> None:
        logging.getLogger("svc").info("ready")

    async def stop(self) -> None:
        pathlib.Path({str(marker)!r}).write_text("yes")

run_service("probe", dict, lambda settings: Probe(), drain_timeout=lambda s: 5.0)
"""
    env = {**os.environ, "OTEL_SDK_DISABLED": "true", "NEXUS_LOG_FORMAT": "json"}
    with subprocess.Popen(
        [sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stderr is not None
        first = json.loads(proc.stderr.readline())  # blocks until the service logged "ready"
        assert (first["service"], first["message"]) == ("probe", "ready")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    assert marker.read_text() == "yes"


def test_invalid_settings_are_one_line_and_exit_2() -> None:
    """A bad variable ends the process before anything starts: one line naming it, status 2
    (`EXIT_BAD_SETTINGS`), no traceback."""
    code = """
from pydantic_settings import BaseSettings, SettingsConfigDict
from nexus_events.runtime.process import run_service

class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NEXUS_")
    probe_port: int = 1

run_service("probe", Settings, lambda s: 1 / 0)
"""
    env = {**os.environ, "OTEL_SDK_DISABLED": "true", "NEXUS_PROBE_PORT": "many"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == EXIT_BAD_SETTINGS == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("probe: invalid settings: NEXUS_PROBE_PORT: ")
