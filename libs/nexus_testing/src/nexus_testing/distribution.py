"""How the suite spreads over pytest-xdist workers (``make test`` runs ``-n`` workers with
``--dist loadgroup``): each test file runs whole on one worker, so its module-scoped fixtures
(a dev stack, a cluster) start once; the files that start a whole dev stack or run chaos
against one share one group and so run one after another, since two of them at once on a
two-core machine would starve each other's timing-bound checks (heartbeats, elections)."""

from __future__ import annotations

import pytest

# Test files (paths from the repository root, or a folder ending in "/") that start a whole
# dev stack or a NATS cluster with chaos: one at a time.
ONE_AT_A_TIME = (
    "tests/e2e/",
    "cli/tests/integration/test_cli_stack.py",
    "cli/tests/integration/test_dev_nats_auth.py",
    "tests/deploy/test_compose_smoke.py",
)
STACK_GROUP = "dev-stack"


def group_of(path: str) -> str:
    """The xdist group of the tests in file `path`."""
    if any(path == p or (p.endswith("/") and path.startswith(p)) for p in ONE_AT_A_TIME):
        return STACK_GROUP
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if getattr(config.option, "dist", "no") != "loadgroup":
        return
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item.nodeid.split("::", 1)[0])))
