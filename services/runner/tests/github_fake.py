"""Load the shared fake GitHub REST server from /tests/fakes by path (see llm_fake.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[3] / "tests" / "fakes" / "github_api.py"
_spec = importlib.util.spec_from_file_location("nexus_fakes_github_api", _PATH)
assert _spec is not None
assert _spec.loader is not None
github_api = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = github_api
_spec.loader.exec_module(github_api)

FakeGitHub = github_api.FakeGitHub
