"""Load deploy/nats/render.py (a script, not a package) as a module for the tests that check
what it renders and what it permits."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def issuer_env(renderer: ModuleType) -> dict[str, str]:
    """The auth callout issuer variable a rendered config needs, set to a fresh public key."""
    from nexus_scheduler.callout_jwt import Issuer

    return {renderer.AUTH_CALLOUT_ISSUER_VARIABLE: Issuer(Issuer.generate()).public_key}


def load_renderer() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "nexus_nats_render", ROOT / "deploy/nats/render.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
