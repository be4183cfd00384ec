"""Load the shared fake OpenAI-compatible server from /tests/fakes by path.

Every package's tests are a package named `tests`, so the repository-level `tests.fakes`
cannot be imported by name from here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[3] / "tests" / "fakes" / "openai_server.py"
_spec = importlib.util.spec_from_file_location("nexus_fakes_openai_server", _PATH)
assert _spec is not None
assert _spec.loader is not None
openai_server = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = openai_server
_spec.loader.exec_module(openai_server)

FakeOpenAI = openai_server.FakeOpenAI
Reply = openai_server.Reply
Failure = openai_server.Failure
ToolCall = openai_server.ToolCall
