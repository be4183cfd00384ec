"""Load the shared fake Kubernetes API server from /tests/fakes by path.

Every package's tests are a package named `tests`, so the repository-level `tests.fakes`
cannot be imported by name from here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[3] / "tests" / "fakes" / "kube_api.py"
_spec = importlib.util.spec_from_file_location("nexus_fakes_kube_api", _PATH)
assert _spec is not None
assert _spec.loader is not None
kube_api = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = kube_api
_spec.loader.exec_module(kube_api)

FakeKubeApi = kube_api.FakeKubeApi
JOB_NAME_LABEL = kube_api.JOB_NAME_LABEL
